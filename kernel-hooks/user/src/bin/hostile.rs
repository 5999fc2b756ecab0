//! A hostile program: bad pointers, objects it does not hold, contexts it may not attach,
//! revocations of keys it does not own. Every call must come back with an error code, never
//! a kernel fault. (The next slice fills it in; for now it only exits.)

#![no_std]
#![no_main]

use kernel_hooks_user::entry;

entry!(main);

fn main(_args: [u64; 4]) -> u64 {
    0
}
