//! A writer for the store benchmarks' crash-recovery measurement (`benches/benches/store.rs`):
//! opens the database store in DIR, begins a transaction that writes 1 MiB into object ID,
//! says `in-transaction` on stdout, and waits to be killed (SIGKILL) before it commits.

use std::io::Write;

use secctx::{DbStore, ObjectStore, StoreError};
use twizzler_capsec::ObjID;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(id)) = (
        args.next(),
        args.next().and_then(|s| s.parse::<ObjID>().ok()),
    ) else {
        eprintln!("usage: store-writer DIR OBJECT-ID");
        std::process::exit(2);
    };
    let store = match DbStore::open(&dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("store-writer: {e}");
            std::process::exit(1);
        }
    };
    let r: Result<(), StoreError> = store.transact(|tx| {
        tx.write_at(id, 0, &vec![0xa5; 1 << 20])?;
        println!("in-transaction");
        let _ = std::io::stdout().flush();
        std::thread::sleep(std::time::Duration::from_secs(600));
        Ok(())
    });
    if let Err(e) = r {
        eprintln!("store-writer: {e}");
        std::process::exit(1);
    }
}
