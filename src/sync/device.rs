//! One device's side of the protocol (docs/SYNC.md, "One sync"): the operations it made, the segments it holds,
//! and a sync against a [`Remote`]. Every step leaves a state that the next sync resumes from: the caller persists
//! the [`DeviceLog`] after each (it is serde data), and a crash between two steps repeats the second.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sync::log::{DeviceId, Op, OpId, Segment, VersionVector};
use crate::sync::merge::{merge, Merged};
use crate::sync::seal::{open_segment, seal_key_check, seal_segment, verify_key_check, Cipher};

/// The folder the user picked, on a server: names are relative to it, with `/` between parts.
#[async_trait(?Send)]
pub trait Remote {
    /// The names directly in `folder` (files and folders alike, without a trailing `/`); empty when it is not there.
    async fn list(&self, folder: &str) -> Result<Vec<String>>;
    /// The file at `path`, or `None` when there is none.
    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>>;
    /// Writes the file at `path` whole, making its folders, unless a file is there already: `false` then, and
    /// the file there is kept. A reader sees all of the file or nothing of it. Nothing loci writes is ever
    /// replaced: a segment sent again after a crash finds itself there, and of two first devices one key stands.
    async fn create(&self, path: &str, bytes: &[u8]) -> Result<bool>;
}

/// How a device gets the sync key: from the key record on the server, or by drawing one (the first device).
#[async_trait(?Send)]
pub trait Unlock {
    type Key: Cipher;
    /// New random key material, and its record for the server (the material wrapped for the user's passphrase
    /// or key).
    async fn create(&self) -> Result<(Self::Key, Vec<u8>)>;
    /// The key from the server's record: `BAD_KEY` when the user's passphrase or key does not open it.
    async fn unlock(&self, record: &[u8]) -> Result<Self::Key>;
}

const KEY_PATH: &str = "key";

/// The server's sync key, unlocked: the first device to get here draws it and writes its record.
pub async fn connect<U: Unlock>(remote: &dyn Remote, unlock: &U) -> Result<U::Key> {
    if let Some(record) = remote.get(KEY_PATH).await? {
        return unlock.unlock(&record).await;
    }
    let (key, record) = unlock.create().await?;
    if remote.create(KEY_PATH, &record).await? {
        return Ok(key);
    }
    // Another device wrote its record first: that one stands.
    let record = remote.get(KEY_PATH).await?.ok_or_else(|| Error::SyncFailed("the key record went away".into()))?;
    unlock.unlock(&record).await
}

const CHECK_PATH: &str = "check";
const DEVICES_FOLDER: &str = "d";

fn segment_path(device: &str, n: u64) -> String {
    format!("{DEVICES_FOLDER}/{device}/{n}.seg")
}

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    /// Operations this device sent.
    pub ops_sent: usize,
    /// Other devices' segments merged.
    pub segments_received: usize,
}

/// One device's sync state: persisted by the caller, never sent as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceLog {
    pub device: DeviceId,
    /// Operations made since the last cut.
    pending: Vec<Op>,
    /// The segment cut and not yet known to be on the server: sent again, as it is, until it is.
    outbox: Option<Segment>,
    /// This device's last segment number cut.
    cut: u64,
    clock: u64,
    /// What has been merged: for each device, up to which segment.
    seen: VersionVector,
    /// Every segment merged (this device's own included), by device and number.
    segments: BTreeMap<DeviceId, BTreeMap<u64, Segment>>,
}

impl DeviceLog {
    /// A new device's log; `device` should be 128 random bits in hex.
    pub fn new(device: DeviceId) -> Self {
        DeviceLog {
            device,
            pending: Vec::new(),
            outbox: None,
            cut: 0,
            clock: 0,
            seen: VersionVector::default(),
            segments: BTreeMap::new(),
        }
    }

    /// Records an operation this device made; its id, which it keeps everywhere.
    pub fn record(&mut self, op: Op) -> OpId {
        self.pending.push(op);
        OpId { device: self.device.clone(), segment: self.cut + 1, index: self.pending.len() as u32 - 1 }
    }

    /// Operations made and not yet on the server (pending and cut).
    pub fn unsent(&self) -> usize {
        self.pending.len() + self.outbox.as_ref().map_or(0, |s| s.ops.len())
    }

    /// This device's view: everything merged, with what it made since (as it will be sent).
    pub fn state(&self) -> Result<Merged> {
        let pending = (!self.pending.is_empty()).then(|| self.next_segment(self.pending.clone()));
        merge(self.segments.values().flat_map(|s| s.values()).chain(&self.outbox).chain(&pending))
    }

    fn next_segment(&self, ops: Vec<Op>) -> Segment {
        let clock = self.clock + 1;
        Segment { device: self.device.clone(), n: self.cut + 1, clock, seen: self.seen.clone(), ops }
    }

    /// Sends what this device made, then merges what the others sent. `BAD_KEY` (before anything is sent) when
    /// the server's memory is sealed under another key; `SYNC_FAILED` when the server fails or holds damage.
    pub async fn sync(&mut self, remote: &dyn Remote, cipher: &dyn Cipher) -> Result<SyncReport> {
        self.check_key(remote, cipher).await?;
        let ops_sent = self.send(remote, cipher).await?;
        let segments_received = self.receive(remote, cipher).await?;
        Ok(SyncReport { ops_sent, segments_received })
    }

    /// `BAD_KEY` unless the server's key check opens with `cipher`; the first device writes it.
    pub async fn check_key(&self, remote: &dyn Remote, cipher: &dyn Cipher) -> Result<()> {
        if remote.get(CHECK_PATH).await?.is_none() && remote.create(CHECK_PATH, &seal_key_check(cipher).await?).await? {
            return Ok(());
        }
        let blob = remote.get(CHECK_PATH).await?.ok_or_else(|| Error::SyncFailed("the key check went away".into()))?;
        verify_key_check(cipher, &blob).await
    }

    /// Sends the segment cut and not yet sent, if any, then cuts the pending operations into the next one and
    /// sends that. A device merges nothing while it has operations to send, so a segment's `seen` holds for all
    /// its operations.
    pub async fn send(&mut self, remote: &dyn Remote, cipher: &dyn Cipher) -> Result<usize> {
        let mut sent = 0;
        loop {
            if self.outbox.is_none() && !self.pending.is_empty() {
                let ops = std::mem::take(&mut self.pending);
                let segment = self.next_segment(ops);
                (self.cut, self.clock) = (segment.n, segment.clock);
                self.outbox = Some(segment);
            }
            let Some(segment) = &self.outbox else { return Ok(sent) };
            // Already there (sent before a crash cut the answer off): the same operations, so as good as sent.
            remote.create(&segment_path(&segment.device, segment.n), &seal_segment(cipher, segment).await?).await?;
            sent += segment.ops.len();
            if let Some(segment) = self.outbox.take() {
                self.hold(segment);
            }
        }
    }

    /// Fetches and merges the segments of other devices that this one lacks: each device's in order, up to a
    /// gap, and each only once what it had seen is here too (causal order). Nothing is merged if one fails.
    pub async fn receive(&mut self, remote: &dyn Remote, cipher: &dyn Cipher) -> Result<usize> {
        if self.outbox.is_some() {
            return Err(Error::SyncFailed("a segment waits to be sent: send it before merging".into()));
        }
        let mut fetched: Vec<Segment> = Vec::new();
        for device in remote.list(DEVICES_FOLDER).await? {
            if device == self.device {
                continue;
            }
            let folder = format!("{DEVICES_FOLDER}/{device}");
            let mut numbers: Vec<u64> =
                remote.list(&folder).await?.iter().filter_map(|name| name.strip_suffix(".seg")?.parse().ok()).collect();
            numbers.sort_unstable();
            let first = self.seen.get(&device) + 1;
            // Each in turn from the first not merged, up to a gap: the ones after it wait for it.
            let wanted = numbers.into_iter().skip_while(|&n| n < first);
            for (next, n) in (first..).zip(wanted) {
                if n != next {
                    break;
                }
                let Some(bytes) = remote.get(&segment_path(&device, n)).await? else { break };
                fetched.push(open_segment(cipher, &device, n, &bytes).await?);
            }
        }
        // Refuse a conflict before holding anything: the merge of all is what would fail later.
        merge(self.segments.values().flat_map(|s| s.values()).chain(&fetched))?;
        let mut received = 0;
        loop {
            let (ready, waiting): (Vec<Segment>, Vec<Segment>) =
                fetched.into_iter().partition(|s| s.seen.0.iter().all(|(d, &n)| self.holds(d, n)) && self.next_of(s));
            if ready.is_empty() {
                break;
            }
            received += ready.len();
            for s in ready {
                self.hold(s);
            }
            fetched = waiting;
        }
        Ok(received)
    }

    fn holds(&self, device: &str, n: u64) -> bool {
        n == 0 || self.segments.get(device).is_some_and(|held| held.contains_key(&n))
    }

    /// Whether `s` follows the last segment held of its device.
    fn next_of(&self, s: &Segment) -> bool {
        s.n == self.seen.get(&s.device) + 1
    }

    fn hold(&mut self, s: Segment) {
        self.clock = self.clock.max(s.clock);
        if s.device != self.device {
            self.seen.0.insert(s.device.clone(), s.n);
        }
        self.segments.entry(s.device.clone()).or_default().insert(s.n, s);
    }
}
