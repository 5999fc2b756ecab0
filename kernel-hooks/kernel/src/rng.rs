//! Entropy for key generation: the processor's `rdrand`, behind `rand_core`'s traits.
//!
//! `twizzler-security` takes a caller-supplied RNG, so the kernel uses its own entropy source.
//! Key generation needs an infallible `CryptoRng`; `rdrand` can transiently have no entropy
//! ready, so each draw retries a bounded number of times (Intel recommends 10) and, if the
//! hardware still fails, the kernel stops: generating keys from anything weaker is not an
//! option.

use core::convert::Infallible;

use rand_core::{TryCryptoRng, TryRng};

use crate::cpu;
use crate::exit::{self, Outcome};

const RETRIES: usize = 10;

/// The `rdrand` instruction as a cryptographic RNG. Construct it with [`RdRand::new`], which
/// checks the processor has it.
pub struct RdRand(());

impl RdRand {
    /// `Some` if the processor supports `rdrand` and it delivers a value.
    pub fn new() -> Option<Self> {
        if !cpu::features().rdrand {
            return None;
        }
        let rng = Self(());
        rng.draw().map(|_| rng)
    }

    fn draw(&self) -> Option<u64> {
        (0..RETRIES).find_map(|_| cpu::rdrand64())
    }

    fn next(&self) -> u64 {
        match self.draw() {
            Some(v) => v,
            None => {
                crate::println!("rdrand failed {RETRIES} times in a row: no entropy, stopping");
                exit::exit(Outcome::Failure)
            }
        }
    }
}

impl TryRng for RdRand {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(self.next() as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.next())
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        Ok(())
    }
}

impl TryCryptoRng for RdRand {}
