//! The change log: operations with stable ids, cut into segments that carry what their device had merged
//! (a version vector) and a Lamport clock. Data only; what a set of segments means is `merge`'s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::types::TimeMs;

/// 128 random bits (hex), drawn when a memory first syncs: says nothing about the user or the device.
pub type DeviceId = String;

/// An operation's id, the same on every device: its device, its segment's number there, its index in it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId {
    pub device: DeviceId,
    pub segment: u64,
    pub index: u32,
}

/// For each device, the last of its segments merged (with all those before it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionVector(pub BTreeMap<DeviceId, u64>);

impl VersionVector {
    /// The last segment of `device` merged (0: none).
    pub fn get(&self, device: &str) -> u64 {
        self.0.get(device).copied().unwrap_or(0)
    }

    /// Whether segment `n` of `device` is merged.
    pub fn covers(&self, device: &str, n: u64) -> bool {
        self.get(device) >= n
    }
}

/// A turn as the log carries it (its id is its operation's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnOp {
    pub session: String,
    pub speaker: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caption: Option<String>,
    pub time: TimeMs,
    pub ingested: TimeMs,
}

/// An episode or a fact that distillation made. `key` says what it was made from, so that two devices that
/// distilled the same input make the same key (an episode: its sorted source turn ids; a fact: its episode's key and
/// its place in the distiller's answer). The body is the record as the distiller wrote it, opaque here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DerivedOp {
    pub key: String,
    /// The turns it was made from: it goes when any of them goes.
    pub sources: Vec<OpId>,
    pub body: serde_json::Value,
}

/// One change a device made (docs/SYNC.md, "The change log").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Op {
    Turn(TurnOp),
    #[serde(rename_all = "camelCase")]
    Title {
        session: String,
        title: String,
    },
    #[serde(rename_all = "camelCase")]
    ForgetTurn {
        turn: OpId,
    },
    #[serde(rename_all = "camelCase")]
    ForgetSession {
        session: String,
    },
    ForgetAll,
    Derived(DerivedOp),
    #[serde(rename_all = "camelCase")]
    ForgetDerived {
        key: String,
    },
}

/// The operations one device made between two syncs, as sealed and sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    pub device: DeviceId,
    /// 1, 2, 3… for each device.
    pub n: u64,
    /// Lamport clock: above every segment in `seen` and the device's previous one.
    pub clock: u64,
    /// What the device had merged when it made these operations (a device merges only once it has sent what it
    /// made, so one vector holds for the whole segment).
    pub seen: VersionVector,
    pub ops: Vec<Op>,
}

impl Segment {
    /// Its operations with their ids.
    pub fn ops_with_ids(&self) -> impl Iterator<Item = (OpId, &Op)> + '_ {
        self.ops.iter().enumerate().map(|(i, op)| (self.op_id(i as u32), op))
    }

    pub fn op_id(&self, index: u32) -> OpId {
        OpId { device: self.device.clone(), segment: self.n, index }
    }

    /// The total order of operations where one is needed (a title's last writer, a derived record's first):
    /// (clock, device, segment, index). It agrees with causality, since a clock rises along it.
    pub fn order_key(&self, index: u32) -> (u64, &str, u64, u32) {
        (self.clock, &self.device, self.n, index)
    }

    /// Whether its operation `index` happened after operation `other_index` of `other`: the device had merged
    /// `other` when it made it (or made both, in this order). Otherwise they are concurrent (or the other way).
    pub fn happened_after(&self, index: u32, other: &Segment, other_index: u32) -> bool {
        if self.device == other.device {
            return (self.n, index) > (other.n, other_index);
        }
        self.seen.covers(&other.device, other.n)
    }
}
