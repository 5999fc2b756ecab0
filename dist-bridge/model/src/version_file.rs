//! The controller's version file: a model of `VersionFile::open_and_bump`, `read_version`
//! and `write_version` (`dist-bridge/src/controller.rs`), one step per system call that
//! matters to a crash, and of what a crash keeps of each.

use crate::Mutation;

/// What the directory entry `<file>` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Content {
    /// No file: the first start.
    Missing,
    /// A valid file holding this version.
    Version(u8),
    /// A file whose data never reached the disk (`decode_version_file` refuses it).
    Torn,
}

/// The disk: the version file as a crash would leave it, and as the running process sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Disk {
    /// What `<file>` names after a crash (the directory's durable state).
    pub durable: Content,
    /// What `<file>` names now (the page cache).
    pub cached: Content,
    /// `<file>.tmp`, if written since the last crash: its version and whether its data is on
    /// the disk (fsynced).
    pub tmp: Option<(u8, bool)>,
    /// Whether the data of the file `<file>` names now is on the disk.
    pub cached_data_durable: bool,
}

impl Disk {
    /// No file yet.
    pub fn new() -> Self {
        Self {
            durable: Content::Missing,
            cached: Content::Missing,
            tmp: None,
            cached_data_durable: true,
        }
    }

    /// A crash: the page cache is lost, the directory holds what was fsynced.
    pub fn crash(&mut self) {
        self.cached = self.durable;
        self.cached_data_durable = true;
        self.tmp = None;
    }
}

impl Default for Disk {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a start is: the next step of `VersionFile::open_and_bump`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Boot {
    /// `read_version`.
    Read,
    /// `write_version`: create/truncate `<file>.tmp` and write the new content.
    WriteTmp(u8),
    /// `write_version`: `sync_all` of `<file>.tmp`.
    FsyncTmp(u8),
    /// `write_version`: `rename` over `<file>`.
    Rename(u8),
    /// `sync_parent`: fsync of the directory.
    FsyncDir(u8),
    /// `open_and_bump` returned: the node serves as this controller version (`Node::start`).
    Serve(u8),
    /// `read_version` refused the file (corrupt): the node does not start.
    Refused,
}

impl Boot {
    /// One step: the disk after it, and where the start goes next (`None` once serving).
    pub fn step(self, disk: &mut Disk, m: Option<Mutation>) -> Boot {
        match self {
            Boot::Read => match disk.cached {
                Content::Missing => Boot::WriteTmp(1),
                Content::Version(v) => Boot::WriteTmp(v + 1),
                Content::Torn => Boot::Refused,
            },
            Boot::WriteTmp(v) => {
                disk.tmp = Some((v, false));
                Boot::FsyncTmp(v)
            }
            Boot::FsyncTmp(v) => {
                disk.tmp = Some((v, true));
                Boot::Rename(v)
            }
            Boot::Rename(v) => {
                let durable = disk.tmp.is_some_and(|(_, d)| d);
                disk.tmp = None;
                disk.cached = Content::Version(v);
                disk.cached_data_durable = durable;
                Boot::FsyncDir(v)
            }
            Boot::FsyncDir(v) => {
                if m != Some(Mutation::NoDirFsync) {
                    disk.durable = if disk.cached_data_durable {
                        disk.cached
                    } else {
                        Content::Torn
                    };
                }
                Boot::Serve(v)
            }
            Boot::Serve(v) => Boot::Serve(v),
            Boot::Refused => Boot::Refused,
        }
    }
}
