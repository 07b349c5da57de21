//! One device's side of the protocol (docs/SYNC.md, "One sync"): the operations it made, the segments it holds,
//! and a sync against a [`Remote`]. The log is serde data that the caller persists after each step; a crash between
//! two steps repeats the second. The network steps take a snapshot, not the log, so that a memory can take writes
//! while a sync is in flight.

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

/// At most this many operations, and about this many bytes of JSON (one larger operation goes alone), to a
/// segment: a device back from long offline, or an import, sends many segments, not one that others must fetch
/// and open whole.
pub const SEGMENT_OPS: usize = 1000;
pub const SEGMENT_BYTES: usize = 1 << 20;

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
    /// Operations made since the last cut, in the segments they will be cut into (see [`SEGMENT_OPS`]).
    pending: Vec<Vec<Op>>,
    /// The JSON bytes of the last of them.
    pending_bytes: usize,
    /// Segments cut and not yet known to be on the server, oldest first: sent again, as they are, until they are.
    outbox: Vec<Segment>,
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
            pending_bytes: 0,
            outbox: Vec::new(),
            cut: 0,
            clock: 0,
            seen: VersionVector::default(),
            segments: BTreeMap::new(),
        }
    }

    /// Records an operation this device made; its id, which it keeps everywhere.
    pub fn record(&mut self, op: Op) -> OpId {
        let bytes = serde_json::to_vec(&op).map_or(0, |json| json.len());
        match self.pending.last_mut() {
            Some(last) if last.len() < SEGMENT_OPS && self.pending_bytes + bytes <= SEGMENT_BYTES => {
                last.push(op);
                self.pending_bytes += bytes;
            }
            _ => {
                self.pending.push(vec![op]);
                self.pending_bytes = bytes;
            }
        }
        let index = self.pending.last().map_or(0, |last| last.len() as u32 - 1);
        OpId { device: self.device.clone(), segment: self.cut + self.pending.len() as u64, index }
    }

    /// Operations made and not yet known to be on the server.
    pub fn unsent(&self) -> usize {
        self.pending.iter().chain(self.outbox.iter().map(|s| &s.ops)).map(Vec::len).sum()
    }

    /// This device's view: everything merged, with what it made since (as it will be sent).
    pub fn state(&self) -> Result<Merged> {
        let pending = self.pending_segments(self.pending.clone());
        merge(self.segments.values().flat_map(|s| s.values()).chain(&self.outbox).chain(&pending))
    }

    /// `chunks` as this device's next segments, with what it has merged now.
    fn pending_segments(&self, chunks: Vec<Vec<Op>>) -> Vec<Segment> {
        (1..)
            .zip(chunks)
            .map(|(i, ops)| Segment {
                device: self.device.clone(),
                n: self.cut + i,
                clock: self.clock + i,
                seen: self.seen.clone(),
                ops,
            })
            .collect()
    }

    /// Cuts the operations made since the last cut into this device's next segments, with what the device had
    /// merged when it made them. Done before every merge, so that a segment's `seen` holds for all its operations.
    fn cut(&mut self) {
        let chunks = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        for segment in self.pending_segments(chunks) {
            (self.cut, self.clock) = (segment.n, segment.clock);
            self.outbox.push(segment);
        }
    }

    /// The segments to send, oldest first, the operations made since the last cut included. They are sealed and
    /// sent with the memory free for other calls (see [`send_segments`]), then marked with [`sent`](Self::sent).
    pub fn outgoing(&mut self) -> Vec<Segment> {
        self.cut();
        self.outbox.clone()
    }

    /// This device's segments up to `n` are on the server.
    pub fn sent(&mut self, n: u64) {
        while self.outbox.first().is_some_and(|s| s.n <= n) {
            let segment = self.outbox.remove(0);
            self.hold(segment);
        }
    }

    /// For each device, up to which segment this one has merged: what to fetch after ([`fetch_segments`]).
    pub fn merged_up_to(&self) -> &VersionVector {
        &self.seen
    }

    /// Merges segments fetched from the server, in any order; those that cannot be merged yet (one of their
    /// device's earlier segments, or one they had seen, is missing) wait for a later sync. The operations made
    /// meanwhile are cut first: they were made without knowing these. Nothing is merged when one conflicts with
    /// a segment held (`SYNC_FAILED`). Returns how many were merged.
    pub fn merge_fetched(&mut self, mut fetched: Vec<Segment>) -> Result<usize> {
        merge(self.segments.values().flat_map(|s| s.values()).chain(&self.outbox).chain(&fetched))?;
        self.cut();
        let mut merged = 0;
        loop {
            let (ready, waiting): (Vec<Segment>, Vec<Segment>) =
                fetched.into_iter().partition(|s| s.seen.0.iter().all(|(d, &n)| self.holds(d, n)) && self.next_of(s));
            if ready.is_empty() {
                return Ok(merged);
            }
            merged += ready.len();
            for s in ready {
                self.hold(s);
            }
            fetched = waiting;
        }
    }

    /// One whole sync: sends what this device made, then merges what the others sent. `BAD_KEY` (before anything
    /// is sent) when the server's memory is sealed under another key; `SYNC_FAILED` when the server fails or
    /// holds damage. It holds the log throughout; a caller that must stay free for writes meanwhile runs the
    /// steps itself: [`outgoing`](Self::outgoing), [`send_segments`], [`sent`](Self::sent), [`fetch_segments`],
    /// [`merge_fetched`](Self::merge_fetched).
    pub async fn sync(&mut self, remote: &dyn Remote, cipher: &dyn Cipher) -> Result<SyncReport> {
        check_key(remote, cipher).await?;
        let outgoing = self.outgoing();
        let ops_sent = outgoing.iter().map(|s| s.ops.len()).sum();
        if let Some(last) = send_segments(remote, cipher, &outgoing).await? {
            self.sent(last);
        }
        let fetched = fetch_segments(remote, cipher, &self.seen, &self.device).await?;
        let segments_received = self.merge_fetched(fetched)?;
        Ok(SyncReport { ops_sent, segments_received })
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

/// `BAD_KEY` unless the server's key check opens with `cipher`; the first device writes it.
pub async fn check_key(remote: &dyn Remote, cipher: &dyn Cipher) -> Result<()> {
    if remote.get(CHECK_PATH).await?.is_none() && remote.create(CHECK_PATH, &seal_key_check(cipher).await?).await? {
        return Ok(());
    }
    let blob = remote.get(CHECK_PATH).await?.ok_or_else(|| Error::SyncFailed("the key check went away".into()))?;
    verify_key_check(cipher, &blob).await
}

/// Seals and sends `segments` (one device's, oldest first); the number of the last one on the server. One found
/// there already was sent before a crash cut the answer off: the same operations, so as good as sent.
pub async fn send_segments(remote: &dyn Remote, cipher: &dyn Cipher, segments: &[Segment]) -> Result<Option<u64>> {
    for segment in segments {
        remote.create(&segment_path(&segment.device, segment.n), &seal_segment(cipher, segment).await?).await?;
    }
    Ok(segments.last().map(|s| s.n))
}

/// The segments on the server after `merged` (see [`DeviceLog::merged_up_to`]), other than device `me`'s, opened:
/// each device's in order, up to a gap (the ones after it wait for it). `SYNC_FAILED` when one does not open.
pub async fn fetch_segments(
    remote: &dyn Remote,
    cipher: &dyn Cipher,
    merged: &VersionVector,
    me: &str,
) -> Result<Vec<Segment>> {
    let mut fetched = Vec::new();
    for device in remote.list(DEVICES_FOLDER).await? {
        if device == me {
            continue;
        }
        let folder = format!("{DEVICES_FOLDER}/{device}");
        let mut numbers: Vec<u64> =
            remote.list(&folder).await?.iter().filter_map(|name| name.strip_suffix(".seg")?.parse().ok()).collect();
        numbers.sort_unstable();
        let first = merged.get(&device) + 1;
        let wanted = numbers.into_iter().skip_while(|&n| n < first);
        for (next, n) in (first..).zip(wanted) {
            if n != next {
                break;
            }
            let Some(bytes) = remote.get(&segment_path(&device, n)).await? else { break };
            fetched.push(open_segment(cipher, &device, n, &bytes).await?);
        }
    }
    Ok(fetched)
}
