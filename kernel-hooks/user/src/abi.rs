//! The system-call ABI between the reference kernel and its ring-3 programs: numbers, error
//! codes, object kinds, and what a program's report means. The kernel includes this very file
//! (`#[path]`), so the two sides cannot disagree.
//!
//! A system call is `int 0x80` with the number in `rax` and its arguments in `rdi`, `rsi`,
//! `rdx`, `r10`, `r8` (Twizzler's order on x86_64). It returns `rax` = 0 on success or an
//! [`Error`] code, and its results in `rdx` and `r8` (an object id is `rdx` = low 64 bits, `r8`
//! = high 64 bits; an id passed in is two argument registers, low first). Every other register
//! is preserved. [`SYS_EXIT`] and [`SYS_CHECKPOINT`] keep the assembly probes' ABI: their one
//! argument is in `rsi`.

use twizzler_capsec::ObjID;

/// The object id passed in two words (`lo` the low 64 bits), as arguments and results carry
/// one.
pub fn id_from_words(lo: u64, hi: u64) -> ObjID {
    ObjID::new(u128::from(lo) | (u128::from(hi) << 64))
}

/// The two words (low, high) an object id is passed in.
pub fn id_words(id: ObjID) -> (u64, u64) {
    (id.raw() as u64, (id.raw() >> 64) as u64)
}

/// End the task; `rsi` is its exit value.
pub const SYS_EXIT: u64 = 0;
/// The assembly probes' checkpoint (`rsi`); a program gets [`Error::NoSys`].
pub const SYS_CHECKPOINT: u64 = 1;
/// Report step `rdi` of the program's scenario with result `rsi` (a [`report`] code) and
/// detail `rdx`: the kernel prints it as a row, beside what it expected and saw itself.
pub const SYS_REPORT: u64 = 2;
/// Read the clock: `rdx` = the engine's time in Unix ns (what capability expiries are on), `r8`
/// = the TSC's calibrated frequency in Hz.
pub const SYS_CLOCK: u64 = 3;
/// Fill `rsi` bytes at `rdi` (at most [`MAX_COPY`]) with entropy from the processor (rdrand).
pub const SYS_ENTROPY: u64 = 4;
/// Give up the processor. (Due expiries run on every return to user mode: once a call has
/// returned a time past a grant's expiry, the grant's pages are unmapped.)
pub const SYS_YIELD: u64 = 5;
/// Create an object: `rdi` = kind ([`KIND_DATA`] or [`KIND_CONTEXT`]), `rsi` = pages after the
/// null page (1 ..= [`MAX_OBJECT_PAGES`]), `rdx` = default protections (bits of
/// `Protections`), `r10`/`r8` = the `kuid` (a key object; 0/0 for none). Returns its id. A
/// context starts as an empty encoded context.
pub const SYS_CREATE_OBJECT: u64 = 6;
/// Create a key object from an encoded verifying key: `rdi` = pointer, `rsi` = length.
/// Returns its id; the calling task owns it (may revoke it and what it signs).
pub const SYS_CREATE_KEY: u64 = 7;
/// Map object `rdi`/`rsi` into the task: returns `rdx` = the address of its byte 0 (its slot;
/// byte 0 .. 4095 is the null page). Every access is still decided by the engine, on the fault.
pub const SYS_MAP: u64 = 8;
/// Unmap object `rdi`/`rsi`: its pages leave the task's page tables and its slot faults as
/// unmapped.
pub const SYS_UNMAP: u64 = 9;
/// Attach security context `rdi`/`rsi` (inactive). The task's active context must grant it
/// `READ` on the context object.
pub const SYS_ATTACH: u64 = 10;
/// Detach inactive context `rdi`/`rsi`, dropping the pages mapped under it.
pub const SYS_DETACH: u64 = 11;
/// Make attached context `rdi`/`rsi` the active one.
pub const SYS_SWITCH: u64 = 12;
/// Read the active context's id.
pub const SYS_ACTIVE: u64 = 13;
/// Revoke key object `rdi`/`rsi` (one this task created): nothing it signs grants any more.
pub const SYS_REVOKE_KEY: u64 = 14;
/// Revoke a record: `rdi` = its kind (the `RecordKind` code), `rsi` = pointer to its encoded
/// bytes, `rdx` = length. Its target's `kuid` must be a key this task created.
pub const SYS_REVOKE_RECORD: u64 = 15;
/// Set the fault-recovery range: a denied access whose instruction lies in `rdi .. rsi`
/// resumes at `rdx` with `rax` = [`FAULT_DENIED`] instead of ending the task.
pub const SYS_SET_RECOVERY: u64 = 16;

/// Bytes per object slot: object `n`'s byte `b` is at user address `slot * SLOT_SIZE + b`.
pub const SLOT_SIZE: u64 = 1 << 30;
/// The last user slot (user addresses are `SLOT_SIZE .. (LAST_SLOT + 1) * SLOT_SIZE`).
pub const LAST_SLOT: u64 = 400;

/// Test-only: move the engine's clock forward by `rdi` ns (at most one day) and run the
/// expiries that makes due; returns the new time. Only a task the kernel started with the
/// right may (the scenarios program, to expire a capability without waiting on a timing
/// window); any other gets [`Error::NotAllowed`]. A real kernel would not have this call.
pub const SYS_ADVANCE_CLOCK: u64 = 17;
/// Copy the program's own key and objects into `rdi` (`rsi` bytes, at least
/// [`self_info::WORDS`] × 8): the layout is [`self_info`]'s `u64` words, little-endian. The
/// loader makes the program's code, data, stack and heap, and its private contexts, with no
/// default protections, keyed by a key it generated for this program alone; its start
/// context holds capabilities signed by that key for them. With the key's seed, the program signs the same capabilities into
/// every context it builds (`kernel_hooks_user::own`).
pub const SYS_SELF: u64 = 18;

/// Change the principal label of the calling task's active context (`docs/DIFC.md` §4.1):
/// `rdi` = pointer to the new label's `TLBL` encoding, `rsi` = its length. Every tag added
/// needs `T+`, every tag removed `T−` (ownership records in the context); the context's own
/// bytes must stay readable. Returns when every page the new label does not allow is
/// write-protected or unmapped on every CPU.
pub const SYS_SCTX_LABEL: u64 = 19;
/// Create an object with a data label: `rdi` = kind, `rsi` = pages, `rdx` = default
/// protections (as [`SYS_CREATE_OBJECT`]), `r10` = pointer to the `kuid` (16 bytes,
/// little-endian, 0 for none) followed by the label's `TLBL` encoding, `r8` = their length
/// (16 alone: the creator's principal label, as [`SYS_CREATE_OBJECT`] uses). A label other
/// than the creator's must pass the write clauses for the creator's active context (§4.1). A
/// context object also starts at that label as a principal.
pub const SYS_CREATE_LABELLED: u64 = 20;

/// The layout of what [`SYS_SELF`] copies: indices of `u64` words.
pub mod self_info {
    /// 4 words: the 32-byte seed of the program's Ed25519 key (`SigningKey::from_entropy`).
    pub const SEED: usize = 0;
    /// 2 words: the id of its key object (the `kuid` of its objects), low first.
    pub const KUID: usize = 4;
    /// 2 words: the heap object's id.
    pub const HEAP: usize = 6;
    /// The address of the heap object's byte 0.
    pub const HEAP_BASE: usize = 8;
    /// Pages of the heap after its null page.
    pub const HEAP_PAGES: usize = 9;
    /// 2 words: the stack object's id.
    pub const STACK: usize = 10;
    /// 2 words per context: the program's private context objects ([`CONTEXTS_N`]): no
    /// default protections, keyed by its key, each granted `rw-` by its start context, so
    /// that only the program can attach or edit them.
    pub const CONTEXTS: usize = 12;
    /// How many private contexts the loader makes for a program.
    pub const CONTEXTS_N: usize = 4;
    /// Pages of each private context after its null page.
    pub const CONTEXT_PAGES: u64 = 4;
    /// How many objects follow.
    pub const COUNT: usize = CONTEXTS + 2 * CONTEXTS_N;
    /// 3 words per object: id low, id high, the protections its start context grants.
    pub const OBJECTS: usize = COUNT + 1;
    /// The most objects listed (code and data segments, stack, heap).
    pub const MAX_OBJECTS: usize = 8;
    /// Words in all.
    pub const WORDS: usize = OBJECTS + 3 * MAX_OBJECTS;
}

/// The most an advance of the clock may move it.
pub const MAX_CLOCK_ADVANCE_NS: u64 = 86_400_000_000_000;

/// The most bytes one system call copies from or to user memory.
pub const MAX_COPY: u64 = 4096;
/// The most pages an object a program creates may have (after its null page).
pub const MAX_OBJECT_PAGES: u64 = 256;

/// A data object.
pub const KIND_DATA: u64 = 0;
/// A security-context object.
pub const KIND_CONTEXT: u64 = 1;

/// What `rax` holds at the recovery address after a denied access.
pub const FAULT_DENIED: u64 = 0xdead_0000;

/// A system call's error (`rax`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Error {
    /// No such system call.
    NoSys = 1,
    /// A pointer outside the task's user range, in no object the task has mapped, past the
    /// object's pages, or with a length that wraps around.
    BadPointer = 2,
    /// A length over [`MAX_COPY`] (or zero where bytes are needed).
    BadLength = 3,
    /// The engine refused the kernel's copy: the task's contexts do not allow the access.
    Denied = 4,
    /// No object has that id.
    NoObject = 5,
    /// The object is not of the kind the call needs (a context, a key, a mappable object).
    WrongKind = 6,
    /// The task does not own the key.
    NotOwner = 7,
    /// The task's active context does not let it attach that context.
    NotAllowed = 8,
    /// The context is not attached to the task.
    NotAttached = 9,
    /// Already so (attached, active, mapped).
    Already = 10,
    /// Out of slots, frames or object-table entries.
    NoSpace = 11,
    /// Bytes that do not decode (a key, a record).
    Malformed = 12,
    /// An argument out of range (a kind, protection bits, a page count).
    BadArg = 13,
    /// A label change needs an ownership right (`T+` or `T−`) the active context does not
    /// hold, or holds by a record that did not verify (`docs/DIFC.md` §4.1).
    NotOwned = 14,
    /// The information-flow rule refuses: a labelled creation whose label the creator may not
    /// write, a label at which the context could not read its own bytes, or a switch that is
    /// not a permitted label change (`docs/DIFC.md` §4.1, §5.4).
    Flow = 15,
}

impl Error {
    /// Every error, in code order.
    pub const ALL: [Error; 15] = [
        Error::NoSys,
        Error::BadPointer,
        Error::BadLength,
        Error::Denied,
        Error::NoObject,
        Error::WrongKind,
        Error::NotOwner,
        Error::NotAllowed,
        Error::NotAttached,
        Error::Already,
        Error::NoSpace,
        Error::Malformed,
        Error::BadArg,
        Error::NotOwned,
        Error::Flow,
    ];

    /// The error with code `code`.
    pub fn from_code(code: u64) -> Option<Error> {
        Error::ALL.into_iter().find(|e| *e as u64 == code)
    }

    /// Its name, for the tables.
    pub fn name(self) -> &'static str {
        match self {
            Error::NoSys => "ENOSYS",
            Error::BadPointer => "EFAULT",
            Error::BadLength => "EINVAL_LEN",
            Error::Denied => "EACCES",
            Error::NoObject => "ENOENT",
            Error::WrongKind => "EWRONGKIND",
            Error::NotOwner => "EPERM",
            Error::NotAllowed => "ENOTALLOWED",
            Error::NotAttached => "ENOTATTACHED",
            Error::Already => "EALREADY",
            Error::NoSpace => "ENOSPC",
            Error::Malformed => "EMALFORMED",
            Error::BadArg => "EINVAL",
            Error::NotOwned => "ENOTOWNED",
            Error::Flow => "EFLOW",
        }
    }
}

/// Reports from this step number on are measurements, not scenario steps: step
/// `BENCH_STEP + scheme * 100 + op * 2` carries the minimum of an operation's rdtsc cycles,
/// the next step its median (`scheme`: 0 Ed25519, 1 P-256; `op`: see [`BENCH_OPS`]); step
/// `BENCH_STEP + scheme * 100 + 99` marks the end of a scheme's setup (the kernel counts each
/// report's page faults and engine work since the previous report).
pub const BENCH_STEP: u64 = 1000;

/// Timed runs of each benchmarked operation (after one untimed run).
pub const BENCH_RUNS: u64 = 5;

/// The operations the benchmark program measures, in `op` order.
pub const BENCH_OPS: [&str; 6] = [
    "one signature (32-byte message)",
    "capability creation (sign a cap)",
    "key-pair objects (keygen + 2 objects)",
    "context creation (object + map + touch)",
    "context edit (add a cap, in place)",
    "attach + switch",
];

/// The two microservices' shared mailbox (`owner` and `reader`, running at once on two CPUs):
/// the index of each `u64` word past the mailbox object's null page.
pub mod mailbox {
    /// 1 once the owner has published the ids below.
    pub const READY: usize = 0;
    /// The shared object's id (low, high).
    pub const OBJECT: usize = 1;
    /// The reader's context's id (low, high): one of the reader's private contexts, which
    /// the reader publishes (then sets [`CTX_SET`]) for the owner to sign its capability to.
    pub const CTX: usize = 3;
    /// Reads the reader completed (it adds one after each granted read).
    pub const READS: usize = 5;
    /// `READS` as the owner read it when its revocation returned.
    pub const READS_AT_REVOKE: usize = 6;
    /// The id (low, high) of an object private to the owner: no default protections, and a
    /// capability only in the owner's own context. The owner has written to it.
    pub const SECRET: usize = 7;
    /// The address of the owner's heap (its byte 0); the reader has not mapped it.
    pub const HEAP: usize = 9;
    /// 1 once the reader has switched to its context (after which it unmaps nothing).
    pub const READER_SWITCHED: usize = 10;
    /// 1 once the owner, after that, has touched its private object and its heap again, so
    /// both are mapped for the owner while the reader tries them.
    pub const OWNER_TOUCHED: usize = 11;
    /// The id (low, high) of the owner's heap object: ids are not secrets, so the reader
    /// maps it by id and must still be denied (no capability, no default protections).
    pub const HEAP_ID: usize = 12;
    /// The id (low, high) of the owner's stack object, likewise.
    pub const STACK_ID: usize = 14;
    /// 1 once the reader has published [`CTX`].
    pub const CTX_SET: usize = 16;
    /// The id (low, high) of the owner's own context (private to the owner: the reader may
    /// not attach it).
    pub const OWNER_CTX: usize = 17;
    /// From this word on: the encoded capability (`CAP_LEN` bytes, little-endian words) the
    /// owner signed for the reader's context; the reader installs it in its context itself,
    /// as Twizzler programs hand capabilities over: as data.
    pub const CAP: usize = 32;
}

/// What a program reports for a step ([`SYS_REPORT`]'s `rsi`).
pub mod report {
    /// The step succeeded (an access granted: the detail is the byte read).
    pub const OK: u64 = 0;
    /// The access was denied (delivered to the recovery address).
    pub const DENIED: u64 = 1;
    /// A system call failed: the detail is its error code.
    pub const ERROR: u64 = 2;
}
