//! Small reads, batched into shared read transactions.
//!
//! In redb's multi-writer mode (other processes may write the store) every read transaction
//! takes the file header's lock (an in-process mutex and an `fcntl` range lock) and reads the
//! header. With many small invocations in flight, those transactions contended for that lock
//! and cost more than the reads. So accepted small reads queue for one reader task, which
//! takes whatever has queued (up to [`MAX_BATCH`]) and serves it from one transaction
//! ([`DbStore::read_batch`]).
//!
//! **Freshness.** A read joins the queue only after its check passed, and the transaction
//! that serves it begins after it was queued, so it sees every commit that completed before
//! the invocation was accepted, exactly as a transaction of its own would.
//!
//! **Revocation.** Each queued read carries its object's gate (held shared, see
//! [`super::gates`]) and drops it only once its bytes are read, so a revocation still waits
//! for the reads it let through, and only for those. A caller that goes away does not cancel
//! its read: the gate is released when the read is done.

use secctx::DbStore;
use tokio::sync::{OwnedRwLockReadGuard, mpsc, oneshot};
use tonic::Status;
use twizzler_capsec::ObjID;

use crate::owner::Grant;
use crate::wire;

use super::service::internal;

/// The most reads served by one transaction.
pub(super) const MAX_BATCH: usize = 64;
/// A batch stops growing at this many bytes, so one batch keeps the worker busy for a short
/// while only (the reads are small: at most 64 KiB each, see the service).
const MAX_BATCH_BYTES: u64 = 256 << 10;
/// Reads waiting at most; further ones wait to queue.
const QUEUE: usize = 1024;

struct Job {
    read: (ObjID, u64, u64),
    gate: OwnedRwLockReadGuard<()>,
    reply: oneshot::Sender<Result<Vec<u8>, Status>>,
}

/// The queue of small reads, and its reader task.
#[derive(Debug)]
pub(super) struct Reads {
    queue: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("read", &self.read).finish()
    }
}

impl Reads {
    /// Starts the reader task on `store` (in the current runtime). It ends when the last
    /// [`Reads`] is dropped and the queue is empty.
    pub(super) fn start(store: DbStore) -> Reads {
        let (queue, jobs) = mpsc::channel(QUEUE);
        tokio::spawn(serve(store, jobs));
        Reads { queue }
    }

    /// Reads the granted bytes; `gate` (the object's, held shared) is released when they are
    /// read.
    pub(super) async fn read(
        &self,
        grant: &Grant,
        gate: OwnedRwLockReadGuard<()>,
    ) -> Result<Vec<u8>, Status> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            read: (grant.object, grant.offset, grant.len),
            gate,
            reply,
        };
        self.queue
            .send(job)
            .await
            .map_err(|_| internal("the reader task has stopped"))?;
        answer
            .await
            .map_err(|_| internal("the reader task dropped a read"))?
    }
}

async fn serve(store: DbStore, mut jobs: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = jobs.recv().await {
        // What has queued meanwhile joins, up to MAX_BATCH reads and MAX_BATCH_BYTES.
        let mut bytes = first.read.2;
        batch.push(first);
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match jobs.try_recv() {
                Ok(job) => {
                    bytes = bytes.saturating_add(job.read.2);
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        let reads: Vec<_> = batch.iter().map(|j| j.read).collect();
        let mut answers = match store.read_batch(&reads) {
            Ok(a) => a.into_iter().map(|r| r.map_err(|e| wire::store_status(&e))),
            Err(e) => {
                let status = wire::store_status(&e);
                for job in batch.drain(..) {
                    drop(job.gate);
                    let _ = job.reply.send(Err(status.clone()));
                }
                continue;
            }
        };
        for job in batch.drain(..) {
            let answer = answers
                .next()
                .unwrap_or_else(|| Err(internal("a read of the batch got no answer")));
            drop(job.gate);
            // The caller may have gone: its read is done all the same.
            let _ = job.reply.send(answer);
        }
    }
}
