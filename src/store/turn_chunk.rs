//! The stored form of a turn chunk (schema 5): the turns' fields in fixed-size binary columns and their texts as one
//! LZ4 block, which [`Turns`] keeps as a page as it is. Opening a memory then neither parses the texts as JSON nor
//! compresses them again (at 100,000 units both together were ~0.3 s of a cold open in the page). Schema 4 chunks
//! (the JSON array of turns) still read; a write stores the chunks it touches in this form.
//!
//! Layout, little-endian:
//! ```text
//! u8 1 (a JSON chunk starts with `[`) · u32 turns · u32 bytes + JSON array of names (session ids and speakers)
//! per turn: u64 id · u32 session name · u32 speaker name · u32 seq · f64 time · f64 ingested · u32 text bytes
//! u32 bytes + JSON array of [turn index, caption] · u32 text bytes in all · the LZ4 block of the texts
//! ```

use super::to_json;
use crate::error::{Error, Result};
use crate::types::bytes::ByteReader;
use crate::types::{PackedTurn, Turn, Turns};

/// The first byte of a binary chunk.
const FORMAT_1: u8 = 1;
/// Bytes per turn in the fixed-size part.
const TURN_BYTES: usize = 8 + 4 + 4 + 4 + 8 + 8 + 4;

fn damaged(why: &str) -> Error {
    Error::Storage(format!("a stored turn chunk is damaged: {why}"))
}

/// Turns (in id order) as a stored chunk.
pub fn encode<'a>(turns: impl IntoIterator<Item = &'a Turn>) -> Result<Vec<u8>> {
    let turns: Vec<&Turn> = turns.into_iter().collect();
    let mut names: Vec<&str> = Vec::new();
    let name_of = |s: &'a str, names: &mut Vec<&'a str>| match names.iter().position(|n| *n == s) {
        Some(i) => i as u32,
        None => {
            names.push(s);
            (names.len() - 1) as u32
        }
    };
    let mut fixed = Vec::with_capacity(turns.len() * TURN_BYTES);
    let mut text = String::with_capacity(turns.iter().map(|t| t.text.len()).sum());
    let mut captions: Vec<(usize, &str)> = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let (session, speaker) = (name_of(&t.session, &mut names), name_of(&t.speaker, &mut names));
        fixed.extend_from_slice(&t.id.to_le_bytes());
        fixed.extend_from_slice(&session.to_le_bytes());
        fixed.extend_from_slice(&speaker.to_le_bytes());
        fixed.extend_from_slice(&t.seq.to_le_bytes());
        fixed.extend_from_slice(&t.time.to_le_bytes());
        fixed.extend_from_slice(&t.ingested.to_le_bytes());
        fixed.extend_from_slice(&(t.text.len() as u32).to_le_bytes());
        text.push_str(&t.text);
        if let Some(c) = &t.caption {
            captions.push((i, c));
        }
    }
    let names = to_json(&names)?;
    let captions = to_json(&captions)?;
    let lz4 = lz4_flex::block::compress(text.as_bytes());
    let mut out = Vec::with_capacity(1 + 12 + names.len() + fixed.len() + captions.len() + lz4.len());
    out.push(FORMAT_1);
    out.extend_from_slice(&(turns.len() as u32).to_le_bytes());
    out.extend_from_slice(&(names.len() as u32).to_le_bytes());
    out.extend_from_slice(&names);
    out.extend_from_slice(&fixed);
    out.extend_from_slice(&(captions.len() as u32).to_le_bytes());
    out.extend_from_slice(&captions);
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(&lz4);
    Ok(out)
}

/// A length-prefixed JSON value of a chunk.
fn json<T: serde::de::DeserializeOwned>(r: &mut ByteReader<'_>) -> Result<T> {
    let n = r.u32().ok_or_else(truncated)? as usize;
    serde_json::from_slice(r.take(n).ok_or_else(truncated)?).map_err(|e| damaged(&e.to_string()))
}

fn truncated() -> Error {
    damaged("it is truncated")
}

/// A chunk's parts, read (not yet checked against its text block).
struct Parts<'b> {
    names: Vec<String>,
    fixed: &'b [u8],
    count: usize,
    captions: Vec<(usize, String)>,
    text_len: u32,
    lz4: &'b [u8],
}

fn parts(bytes: &[u8]) -> Result<Parts<'_>> {
    let mut r = ByteReader::new(bytes);
    r.take(1).ok_or_else(truncated)?; // the format byte, checked by the caller
    let count = r.u32().ok_or_else(truncated)? as usize;
    let names: Vec<String> = json(&mut r)?;
    let fixed = r.take_items(count, TURN_BYTES).ok_or_else(truncated)?;
    let captions: Vec<(usize, String)> = json(&mut r)?;
    let text_len = r.u32().ok_or_else(truncated)?;
    Ok(Parts { names, fixed, count, captions, text_len, lz4: r.rest() })
}

impl Parts<'_> {
    /// The turns' fields, texts left out.
    fn turns(&self) -> Result<Vec<PackedTurn<'_>>> {
        let mut caption = self.captions.iter().peekable();
        let name = |i: u32| self.names.get(i as usize).map(String::as_str).ok_or_else(|| damaged("a name is missing"));
        let mut out = Vec::with_capacity(self.count);
        for (i, f) in self.fixed.chunks_exact(TURN_BYTES).enumerate() {
            let u32_at = |o: usize| u32::from_le_bytes([f[o], f[o + 1], f[o + 2], f[o + 3]]);
            let f64_at = |o: usize| f64::from_le_bytes(f[o..o + 8].try_into().unwrap_or_default());
            let caption = match caption.peek() {
                Some((at, c)) if *at == i => {
                    caption.next();
                    Some(c.as_str())
                }
                _ => None,
            };
            out.push(PackedTurn {
                id: u64::from_le_bytes(f[0..8].try_into().unwrap_or_default()),
                session: name(u32_at(8))?,
                speaker: name(u32_at(12))?,
                seq: u32_at(16),
                time: f64_at(20),
                ingested: f64_at(28),
                text_len: u32_at(36),
                caption,
            });
        }
        if caption.next().is_some() {
            return Err(damaged("a caption names no turn of the chunk"));
        }
        Ok(out)
    }
}

fn is_json(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
}

fn parse_json(bytes: &[u8]) -> Result<Vec<Turn>> {
    serde_json::from_slice(bytes).map_err(|e| damaged(&e.to_string()))
}

/// Adds a stored chunk's turns to `turns`: a binary chunk's text block becomes a page as it is, a JSON one (schema 4)
/// is parsed. A damaged chunk adds nothing.
pub fn load_into(turns: &mut Turns, bytes: &[u8]) -> Result<()> {
    match bytes.first() {
        Some(&FORMAT_1) => {
            let parts = parts(bytes)?;
            let packed = parts.turns()?;
            turns.push_packed(&packed, parts.lz4.into(), parts.text_len).map_err(damaged)
        }
        _ if is_json(bytes) => {
            parse_json(bytes)?.into_iter().for_each(|t| turns.push(t));
            Ok(())
        }
        _ => Err(damaged("it is neither of the known forms")),
    }
}

/// A stored chunk's turns, each whole (what a write merges into).
pub fn decode(bytes: &[u8]) -> Result<Vec<Turn>> {
    if is_json(bytes) {
        return parse_json(bytes);
    }
    let mut turns = Turns::new();
    load_into(&mut turns, bytes)?;
    Ok(turns.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(id: u64, text: &str, caption: Option<&str>) -> Turn {
        Turn {
            id,
            session: format!("s{}", id / 3),
            seq: id as u32 % 3,
            speaker: if id % 2 == 0 { "Ana".into() } else { "Ben".into() },
            text: text.into(),
            caption: caption.map(str::to_string),
            time: 1.7e12 + id as f64 * 1000.5,
            ingested: 1.7e12,
        }
    }

    fn sample() -> Vec<Turn> {
        vec![
            turn(1, "hello there", None),
            turn(2, "", Some("a dog on a beach")),
            turn(3, "héllo ✓ \"quoted\" \n new line", None),
            turn(4, &"long ".repeat(10_000), Some("[1, \"x\"]")),
            turn(5, "the end", None),
        ]
    }

    #[test]
    fn a_chunk_round_trips_and_becomes_a_page_as_it_is() {
        let given = sample();
        let bytes = encode(&given).unwrap();
        assert_eq!(bytes[0], FORMAT_1);
        assert!(bytes.len() < 5_000, "the repeated text is compressed: {} bytes", bytes.len());
        assert_eq!(decode(&bytes).unwrap(), given);
        let mut turns = Turns::new();
        load_into(&mut turns, &bytes).unwrap();
        turns.push(turn(6, "added after", None));
        let mut all = given.clone();
        all.push(turn(6, "added after", None));
        assert_eq!(turns.to_vec(), all);
        assert_eq!(turns.get(&3).map(|t| t.to_turn()), Some(all[2].clone()));
    }

    #[test]
    fn schema_4_json_chunks_still_read() {
        let given = sample();
        let json = serde_json::to_vec(&given).unwrap();
        assert_eq!(decode(&json).unwrap(), given);
        let mut turns = Turns::new();
        load_into(&mut turns, &json).unwrap();
        assert_eq!(turns.to_vec(), given);
    }

    #[test]
    fn a_damaged_chunk_is_refused_and_adds_nothing() {
        let bytes = encode(&sample()).unwrap();
        let mut cases: Vec<Vec<u8>> = vec![
            bytes[..bytes.len() - 3].to_vec(), // the text block cut short
            bytes[..20].to_vec(),              // the columns cut short
            vec![7, 1, 2, 3],                  // an unknown form
            Vec::new(),
        ];
        // A text length that no longer matches the block, and one that cuts "é" in two.
        let fixed_at = 1 + 4 + 4 + u32::from_le_bytes(bytes[5..9].try_into().unwrap()) as usize;
        let mut longer = bytes.clone();
        longer[fixed_at + 36] += 1;
        cases.push(longer);
        let mut split = bytes.clone();
        let (first, third) = (fixed_at + 36, fixed_at + 2 * TURN_BYTES + 36);
        split[first] += 2; // turn 1 ends inside turn 3's "é" (turn 2 is empty)
        split[third] -= 2;
        cases.push(split);
        for (i, bad) in cases.iter().enumerate() {
            let mut turns = Turns::new();
            turns.push(turn(0, "kept", None));
            assert!(load_into(&mut turns, bad).is_err(), "case {i} was accepted");
            assert_eq!(turns.len(), 1, "case {i} added turns");
            assert_eq!(turns.get(&0).map(|t| t.text.into_owned()).as_deref(), Some("kept"));
        }
    }
}
