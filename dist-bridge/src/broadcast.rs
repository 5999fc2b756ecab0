//! Baseline for comparison: broadcast-based revocation (BBR), as in Barrelfish and FractOS.
//!
//! Every node keeps a table of revoked capability names and checks invocations against its own
//! table, locally. Revoking therefore has to reach every node: the revoking node sends a
//! [`BroadcastMessage::Revoke`] to each of its `N - 1` peers, and each answers with a
//! [`BroadcastMessage::Ack`]; the revocation is complete (the revoker may reuse what the
//! capability named) once every ack is in. That is `2 (N - 1)` messages per revocation, and
//! `O(N² K)` over a cluster where every node revokes `K` times, against two messages (one round
//! trip to the owner) per revocation with versioned guards ([`Owner::revoke`]).
//!
//! [`BroadcastNode`] is the per-node state and the message generation and handling; the
//! transport (the service layer) carries the [`Outgoing`] messages and feeds what arrives to
//! [`BroadcastNode::handle`]. Every message sent and received is counted
//! ([`MessageCounts`]). Like [`Owner`], a node is `Send + Sync` (one internal `Mutex`).
//!
//! [`Owner::revoke`]: crate::Owner::revoke
//! [`Owner`]: crate::Owner

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use twizzler_capsec::DecodeError;
use twizzler_capsec::codec::{Reader, Writer};

/// A capability's name in the baseline: the node that issued it and a serial number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CapName {
    /// The issuing node.
    pub issuer: u64,
    /// Serial number at the issuer.
    pub serial: u64,
}

impl fmt::Display for CapName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cap {}#{}", self.issuer, self.serial)
    }
}

/// A message between baseline nodes. The sender is known from the transport.
///
/// Encoding ([`MESSAGE_LEN`] bytes, little-endian, no magic or version):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 1 | kind: 1 revoke, 2 ack (others refused) |
/// | 1 | 8 | issuer node |
/// | 9 | 8 | serial number at the issuer |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BroadcastMessage {
    /// "Add this capability to your revoked table."
    Revoke(CapName),
    /// "Done: I will refuse it from now on."
    Ack(CapName),
}

/// Encoded size of a [`BroadcastMessage`].
pub const MESSAGE_LEN: usize = 1 + 8 + 8;

impl BroadcastMessage {
    /// The wire encoding: kind (1 revoke, 2 ack), issuer, serial (little-endian).
    pub fn encode(&self) -> [u8; MESSAGE_LEN] {
        let (kind, cap) = match self {
            Self::Revoke(c) => (1u8, c),
            Self::Ack(c) => (2u8, c),
        };
        let mut out = [0u8; MESSAGE_LEN];
        Writer::new(&mut out)
            .u8(kind)
            .u64(cap.issuer)
            .u64(cap.serial);
        out
    }

    /// Decodes the wire encoding (total and canonical).
    pub fn decode(bytes: &[u8]) -> Result<Self, BroadcastError> {
        if bytes.len() != MESSAGE_LEN {
            return Err(BroadcastError::Malformed("wrong length"));
        }
        // The length is checked: no read below can run short.
        let short = |_: DecodeError| BroadcastError::Malformed("wrong length");
        let mut r = Reader::new(bytes);
        let kind = r.u8().map_err(short)?;
        let cap = CapName {
            issuer: r.u64().map_err(short)?,
            serial: r.u64().map_err(short)?,
        };
        r.finish().map_err(short)?;
        match kind {
            1 => Ok(Self::Revoke(cap)),
            2 => Ok(Self::Ack(cap)),
            _ => Err(BroadcastError::Malformed("unknown message kind")),
        }
    }
}

/// A message to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// The destination node.
    pub to: u64,
    /// The message.
    pub message: BroadcastMessage,
}

/// Message counters of one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MessageCounts {
    /// Messages this node generated.
    pub sent: u64,
    /// Messages this node handled.
    pub received: u64,
    /// Revocations this node started.
    pub revocations: u64,
}

/// Why a baseline operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BroadcastError {
    /// The capability is in this node's revoked table.
    Revoked(CapName),
    /// A message came from a node that is not a peer.
    UnknownPeer(u64),
    /// The bytes are not a message.
    Malformed(&'static str),
    /// The node's state is unusable (a thread panicked while changing it).
    Unavailable,
}

impl fmt::Display for BroadcastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Revoked(c) => write!(f, "{c} has been revoked"),
            Self::UnknownPeer(n) => write!(f, "message from node {n}, which is not a peer"),
            Self::Malformed(why) => write!(f, "malformed broadcast message: {why}"),
            Self::Unavailable => f.write_str("broadcast node state is unavailable"),
        }
    }
}

impl std::error::Error for BroadcastError {}

#[derive(Debug, Default)]
struct State {
    revoked: HashSet<CapName>,
    awaiting: HashMap<CapName, HashSet<u64>>,
    next_serial: u64,
    counts: MessageCounts,
}

/// One node of the broadcast-revocation baseline (see the [module docs](self)).
#[derive(Debug)]
pub struct BroadcastNode {
    node: u64,
    peers: Vec<u64>,
    state: Mutex<State>,
}

impl BroadcastNode {
    /// Node `node` in a cluster whose other nodes are `peers` (`node` itself is ignored if
    /// listed; duplicates are dropped).
    pub fn new(node: u64, peers: impl IntoIterator<Item = u64>) -> Self {
        let mut peers: Vec<u64> = peers.into_iter().filter(|&p| p != node).collect();
        peers.sort_unstable();
        peers.dedup();
        Self {
            node,
            peers,
            state: Mutex::new(State::default()),
        }
    }

    /// This node.
    pub fn node(&self) -> u64 {
        self.node
    }

    /// The other nodes.
    pub fn peers(&self) -> &[u64] {
        &self.peers
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>, BroadcastError> {
        self.state.lock().map_err(|_| BroadcastError::Unavailable)
    }

    /// Names a new capability issued by this node.
    pub fn issue(&self) -> Result<CapName, BroadcastError> {
        let mut st = self.lock()?;
        let serial = st.next_serial;
        st.next_serial = serial.wrapping_add(1);
        Ok(CapName {
            issuer: self.node,
            serial,
        })
    }

    /// Revokes `cap`: refuses it here at once, and returns the [`BroadcastMessage::Revoke`]
    /// for every peer. Revoking a capability already revoked here sends nothing.
    pub fn revoke(&self, cap: CapName) -> Result<Vec<Outgoing>, BroadcastError> {
        let mut st = self.lock()?;
        if !st.revoked.insert(cap) {
            return Ok(Vec::new());
        }
        st.counts.revocations += 1;
        st.counts.sent += self.peers.len() as u64;
        if !self.peers.is_empty() {
            st.awaiting
                .insert(cap, self.peers.iter().copied().collect());
        }
        Ok(self
            .peers
            .iter()
            .map(|&to| Outgoing {
                to,
                message: BroadcastMessage::Revoke(cap),
            })
            .collect())
    }

    /// Handles a message from peer `from`; returns the replies to send.
    pub fn handle(
        &self,
        from: u64,
        message: BroadcastMessage,
    ) -> Result<Vec<Outgoing>, BroadcastError> {
        if self.peers.binary_search(&from).is_err() {
            return Err(BroadcastError::UnknownPeer(from));
        }
        let mut st = self.lock()?;
        st.counts.received += 1;
        match message {
            BroadcastMessage::Revoke(cap) => {
                st.revoked.insert(cap);
                st.counts.sent += 1;
                Ok(vec![Outgoing {
                    to: from,
                    message: BroadcastMessage::Ack(cap),
                }])
            }
            BroadcastMessage::Ack(cap) => {
                if let Some(waiting) = st.awaiting.get_mut(&cap) {
                    waiting.remove(&from);
                    if waiting.is_empty() {
                        st.awaiting.remove(&cap);
                    }
                }
                Ok(Vec::new())
            }
        }
    }

    /// Whether every peer has acknowledged this node's revocation of `cap` (true when there
    /// is nothing outstanding).
    pub fn is_complete(&self, cap: CapName) -> Result<bool, BroadcastError> {
        Ok(!self.lock()?.awaiting.contains_key(&cap))
    }

    /// The invocation check: refuses a capability in this node's revoked table.
    pub fn check(&self, cap: CapName) -> Result<(), BroadcastError> {
        if self.lock()?.revoked.contains(&cap) {
            Err(BroadcastError::Revoked(cap))
        } else {
            Ok(())
        }
    }

    /// Size of this node's revoked table (it only grows: that is the baseline's memory cost).
    pub fn revoked_len(&self) -> Result<usize, BroadcastError> {
        Ok(self.lock()?.revoked.len())
    }

    /// Message counters.
    pub fn counts(&self) -> Result<MessageCounts, BroadcastError> {
        Ok(self.lock()?.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_reject_garbage() {
        let c = CapName {
            issuer: 3,
            serial: 99,
        };
        for m in [BroadcastMessage::Revoke(c), BroadcastMessage::Ack(c)] {
            assert_eq!(BroadcastMessage::decode(&m.encode()), Ok(m));
        }
        assert!(BroadcastMessage::decode(&[]).is_err());
        assert!(BroadcastMessage::decode(&[0; MESSAGE_LEN]).is_err());
        assert!(BroadcastMessage::decode(&[1; MESSAGE_LEN + 1]).is_err());
    }
}
