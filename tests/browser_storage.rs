//! Headless Chromium: the IndexedDB layout stays bulk. A regression guard that is not a timing: it counts the
//! IndexedDB requests (by wrapping `IDBObjectStore.prototype` in the page) and the records they return. Also: the
//! distillation stores and deletions load back exactly as [`MemStore`] (the reference) holds them, and older
//! schemas migrate.
#![cfg(target_arch = "wasm32")]

use js_sys::{Function, Reflect};
use loci::distill::{DistillItem, DistillMeta, DistillState, DistillWrite, Episode, Fact, FactStatus, Job, JobKind};
use loci::embed::{DIM, MODEL_ID};
use loci::store::idb::IdbStore;
use loci::store::seal::KeySource;
use loci::store::{MemStore, Meta, Rows, Store, StoredUnit, WriteBatch, SCHEMA_VERSION, TURN_CHUNK, VECTOR_CHUNK};
use loci::types::{Session, Turn, Unit, UnitMode};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// Wraps the object-store methods once; `counts()` then reads `{ requests, records, vectorRequests }` since the
/// last `reset()`.
fn install_counter() {
    Function::new_no_args(
        r#"
        if (globalThis.__idb) return;
        const c = globalThis.__idb = { requests: 0, records: 0, vectorRequests: 0 };
        for (const m of ["get", "getAll", "getAllKeys", "getKey", "put", "add", "delete", "clear", "count", "openCursor", "openKeyCursor"]) {
          const f = IDBObjectStore.prototype[m];
          IDBObjectStore.prototype[m] = function (...a) {
            c.requests++;
            if (this.name === "vectors") c.vectorRequests++;
            const r = f.apply(this, a);
            if (m === "getAll") r.addEventListener("success", () => { c.records += r.result.length; });
            return r;
          };
        }"#,
    )
    .call0(&JsValue::NULL)
    .expect("install the counter");
}

fn reset() {
    Function::new_no_args("Object.assign(globalThis.__idb, { requests: 0, records: 0, vectorRequests: 0 })")
        .call0(&JsValue::NULL)
        .unwrap();
}

fn count(field: &str) -> u32 {
    let c = Reflect::get(&js_sys::global(), &"__idb".into()).unwrap();
    Reflect::get(&c, &field.into()).unwrap().as_f64().unwrap() as u32
}

fn vector(id: u32) -> Vec<f32> {
    let mut v = vec![0.0f32; DIM];
    v[id as usize % DIM] = 1.0;
    v[(id as usize * 7 + 1) % DIM] = -0.5;
    v
}

#[wasm_bindgen_test]
async fn opening_100k_units_takes_a_bounded_number_of_requests() {
    const N: u32 = 100_000;
    const PER_SESSION: u32 = 10;
    let _ = IdbStore::delete("t-bulk").await;
    install_counter();
    let store = IdbStore::open("t-bulk").await.expect("open");
    let meta = Meta {
        schema: SCHEMA_VERSION,
        model: MODEL_ID.into(),
        dim: DIM as u32,
        unit_mode: UnitMode::Pair,
        next_turn: 2 * N as u64 + 1,
        next_unit: N + 1,
        embed_pending: Vec::new(),
    };
    // Pair units as a chat stores them: two turns each, ten units per session.
    for start in (1..=N).step_by(5000) {
        let ids = start..(start + 5000).min(N + 1);
        let name = |id: u32| format!("s{}", (id - 1) / PER_SESSION);
        let sessions = ids.clone().filter(|id| (id - 1) % PER_SESSION == 0).map(|id| session(&name(id))).collect();
        let turns = ids.clone().flat_map(|id| [2 * id as u64 - 1, 2 * id as u64].map(|t| turn(t, &name(id)))).collect();
        let units = ids
            .map(|id| StoredUnit {
                unit: Unit { id, session: name(id), turn_ids: vec![2 * id as u64 - 1, 2 * id as u64] },
                vectors: Rows::F32(vector(id)),
            })
            .collect();
        store
            .write(WriteBatch { meta: Some(meta.clone()), sessions, turns, units, ..Default::default() })
            .await
            .expect("write");
    }

    // Open: one request per object store (two for `meta`: the memory's and distillation's records), whatever the
    // number of units; turns, units and vectors arrive as chunk records (schema 4), so the records read are the
    // sessions plus a few hundred chunks, not one per turn and per unit.
    reset();
    let snapshot = store.load().await.expect("load").unblocked();
    assert_eq!(snapshot.units.len(), N as usize);
    assert_eq!(snapshot.turns.len(), 2 * N as usize);
    let sessions = N / PER_SESSION;
    let chunks = N / VECTOR_CHUNK + 1 + (2 * N as u64 / TURN_CHUNK) as u32 + 1;
    assert!(count("requests") <= 8, "{} IndexedDB requests to open", count("requests"));
    assert_eq!(count("vectorRequests"), 1);
    assert!(count("records") <= sessions + chunks, "{} records read", count("records"));
    let u = &snapshot.units[12_345];
    assert_eq!(u.unit.turn_ids, vec![2 * u.unit.id as u64 - 1, 2 * u.unit.id as u64]);
    let t = snapshot.turns.iter().nth(2 * 12_345).expect("turn");
    assert_eq!(t.id, 2 * 12_345 + 1);
    assert_eq!(t.text, format!("turn {}", 2 * 12_345 + 1));
    let back = u.vectors.to_f32(DIM);
    assert!((back[u.unit.id as usize % DIM] - 1.0).abs() < 0.01, "unit {} vector is not its own", u.unit.id);

    // A write of one unit and its turns touches one vector chunk and one turn chunk: a read and a put of each,
    // not a rewrite of everything.
    reset();
    let unit = StoredUnit {
        unit: Unit { id: N + 1, session: "s".into(), turn_ids: vec![2 * N as u64 + 1] },
        vectors: Rows::F32(vector(N + 1)),
    };
    store
        .write(WriteBatch {
            units: vec![unit],
            turns: vec![turn(2 * N as u64 + 1, "s")],
            delete_units: vec![N],
            delete_turns: vec![2 * N as u64],
            ..Default::default()
        })
        .await
        .expect("write one");
    assert!(count("vectorRequests") <= 4, "{} vector requests for one unit", count("vectorRequests"));
    assert!(count("requests") <= 8, "{} requests for one unit", count("requests"));
    let snapshot = store.load().await.expect("reload").unblocked();
    assert_eq!(snapshot.units.len(), N as usize);
    assert!(snapshot.units.iter().any(|u| u.unit.id == N + 1) && !snapshot.units.iter().any(|u| u.unit.id == N));
    assert_eq!(snapshot.turns.len(), 2 * N as usize);
    assert_eq!(snapshot.turns.iter().last().map(|t| t.id), Some(2 * N as u64 + 1));
    assert!(!snapshot.turns.iter().any(|t| t.id == 2 * N as u64));
    store.close();
    IdbStore::delete("t-bulk").await.expect("delete");
}

#[wasm_bindgen_test]
async fn a_schema_1_database_is_migrated_to_vector_chunks() {
    let _ = IdbStore::delete("t-v1").await;
    // Schema 1, as loci 0.1 wrote it: four stores, vectors as a Float32Array inside each unit record.
    let create = Function::new_no_args(
        r#"return new Promise((ok, err) => {
          const r = indexedDB.open("loci:t-v1", 1);
          r.onupgradeneeded = () => {
            const db = r.result;
            db.createObjectStore("meta");
            for (const s of ["sessions", "turns", "units"]) db.createObjectStore(s, { keyPath: "id" });
          };
          r.onsuccess = () => {
            const db = r.result;
            const tx = db.transaction(["meta", "sessions", "units"], "readwrite");
            tx.objectStore("meta").put({ schema: 1, model: "m", dim: 2, unit_mode: "pair", next_turn: 1, next_unit: 2 }, "meta");
            tx.objectStore("sessions").put({ id: "s1", firstTime: 1, lastTime: 1, turnCount: 0 });
            tx.objectStore("units").put({ id: 1, session: "s1", turnIds: [], vectors: new Float32Array([0.6, 0.8]) });
            tx.oncomplete = () => { db.close(); ok(); };
            tx.onerror = () => err(tx.error);
          };
          r.onerror = () => err(r.error);
        })"#,
    );
    let promise: js_sys::Promise = create.call0(&JsValue::NULL).unwrap().into();
    wasm_bindgen_futures::JsFuture::from(promise).await.expect("create a schema-1 database");

    let store = IdbStore::open("t-v1").await.expect("open");
    let first = store.load().await.expect("load schema 1").unblocked();
    assert_eq!(first.meta.as_ref().map(|m| m.schema), Some(SCHEMA_VERSION));
    assert_eq!(first.units[0].vectors, Rows::F32(vec![0.6, 0.8]));
    let again = store.load().await.expect("load migrated").unblocked();
    assert_eq!(again.meta.as_ref().map(|m| m.schema), Some(SCHEMA_VERSION));
    assert!(matches!(again.units[0].vectors, Rows::Int8 { .. }), "vectors moved into a chunk");
    let back = again.units[0].vectors.to_f32(2);
    assert!((back[0] - 0.6).abs() < 0.01 && (back[1] - 0.8).abs() < 0.01, "{back:?}");
    store.close();
    IdbStore::delete("t-v1").await.expect("delete");
}

fn turn(id: u64, session: &str) -> Turn {
    Turn {
        id,
        session: session.into(),
        seq: id as u32,
        speaker: "Maya".into(),
        text: format!("turn {id}"),
        caption: None,
        time: 1.7e12 + id as f64,
        ingested: 1.7e12,
    }
}

fn session(id: &str) -> Session {
    Session { id: id.into(), first_time: 1.7e12, last_time: 1.7e12, turn_count: 2, title: None }
}

/// The batches of a small distillation: turns with their segment job, an episode, facts with a supersede chain,
/// job updates and deletions, then a session forgotten (turns, sessions, episodes and facts deleted in one batch).
fn distill_batches() -> Vec<WriteBatch> {
    let meta = Meta {
        schema: SCHEMA_VERSION,
        model: MODEL_ID.into(),
        dim: 2,
        unit_mode: UnitMode::Pair,
        next_turn: 5,
        next_unit: 1,
        embed_pending: Vec::new(),
    };
    let job = |id: u64, work: JobKind| Job {
        id,
        work,
        attempts: 0,
        rate_limited: 0,
        next_try: 1.7e12,
        parked: false,
        last_error: None,
        created: 1.7e12,
    };
    let episode = |id: u64, turn_ids: Vec<u64>| Episode {
        id,
        title: format!("episode {id}"),
        narrative: "Maya planted basil.".into(),
        time: 1.7e12,
        start: 1.7e12,
        end: 1.7e12 + 60_000.0,
        turn_ids,
        merged_from: vec![],
        ingested: 1.7e12,
        vector: vec![0.6, 0.8],
    };
    let fact = |id: u64, episode: u64, turns: Vec<u64>| Fact {
        id,
        statement: format!("fact {id}"),
        kind: "event".into(),
        time: 1.7e12,
        ingested: 1.7e12 + id as f64,
        episode_ids: vec![episode],
        turn_ids: turns,
        status: FactStatus::Active,
        supersedes: vec![],
        superseded_by: None,
        origin: "new".into(),
        vector: vec![0.8, -0.6],
    };
    let pending = DistillMeta { next_episode: 1, next_fact: 1, next_job: 2, pending: vec![1, 2, 3, 4] };
    let mut old = fact(2, 2, vec![3]);
    old.status = FactStatus::Superseded;
    old.superseded_by = Some(3);
    let mut new = fact(3, 2, vec![3, 4]);
    new.supersedes = vec![2];
    new.origin = "merge".into();
    vec![
        WriteBatch {
            meta: Some(meta),
            sessions: vec![session("a"), session("b")],
            turns: vec![turn(1, "a"), turn(2, "a"), turn(3, "b"), turn(4, "b")],
            distill: DistillWrite {
                meta: Some(pending),
                jobs: vec![job(1, JobKind::Segment { session: "a".into(), last: true })],
                ..Default::default()
            },
            ..Default::default()
        },
        WriteBatch {
            distill: DistillWrite {
                meta: Some(DistillMeta { next_episode: 3, next_fact: 4, next_job: 3, pending: vec![] }),
                episodes: vec![episode(1, vec![1, 2]), episode(2, vec![3, 4])],
                facts: vec![fact(1, 1, vec![1]), old, new],
                jobs: vec![job(2, JobKind::Distill { items: vec![DistillItem { episode: 2, turn_ids: vec![4] }] })],
                delete_jobs: vec![1],
                ..Default::default()
            },
            ..Default::default()
        },
    ]
}

#[wasm_bindgen_test]
async fn distillation_and_deletions_persist_as_in_memstore() {
    let _ = IdbStore::delete("t-distill").await;
    let store = IdbStore::open("t-distill").await.expect("open");
    let reference = MemStore::new();
    for batch in distill_batches() {
        store.write(batch.clone()).await.expect("idb write");
        reference.write(batch).await.expect("mem write");
    }
    // The kept lexical index (a cache) round-trips, and survives a write that deletes nothing.
    for s in [&store as &dyn Store, &reference] {
        s.put_lexical(12, &|sink| sink(b"a kept index")).await.expect("put the lexical index");
        s.write(WriteBatch { sessions: vec![session("a")], ..Default::default() }).await.expect("write");
    }
    let loaded = store.load().await.expect("load").unblocked();
    assert_eq!(loaded, reference.load().await.unwrap().unblocked());
    for s in [&store as &dyn Store, &reference] {
        assert_eq!(s.load_lexical().await.unwrap().as_deref(), Some(&b"a kept index"[..]));
    }
    assert_eq!(loaded.distill.episodes.len(), 2);
    assert_eq!(loaded.distill.facts[2].supersedes, vec![2]);
    assert_eq!(loaded.distill.episodes[0].vector, vec![0.6, 0.8], "vectors round-trip as packed bytes");

    // Forgetting session "b" through the state's cascade: one batch deletes turns, the session, its episode and
    // facts and the job, and updates the distill meta.
    let state = DistillState::from_records(loaded.distill.clone());
    let forget = WriteBatch {
        delete_turns: vec![3, 4],
        delete_sessions: vec!["b".into()],
        distill: state.forget_turns(&[3, 4].into_iter().collect()),
        ..Default::default()
    };
    assert!(!forget.distill.delete_episodes.is_empty() && !forget.distill.delete_facts.is_empty());
    store.write(forget.clone()).await.expect("idb forget");
    reference.write(forget).await.expect("mem forget");
    store.close();
    let store = IdbStore::open("t-distill").await.expect("reopen");
    let after = store.load().await.expect("load after forget").unblocked();
    assert_eq!(after, reference.load().await.unwrap().unblocked());
    for s in [&store as &dyn Store, &reference] {
        assert_eq!(s.load_lexical().await.unwrap(), None, "a write that deletes drops the kept lexical index");
    }
    assert_eq!(after.sessions.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), vec!["a"]);
    assert_eq!(after.turns.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(after.distill.episodes.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(after.distill.facts.iter().map(|f| f.id).collect::<Vec<_>>(), vec![1]);
    assert!(after.distill.jobs.is_empty());

    // A batch the store refuses (a damaged vector) leaves nothing half-written: the turn queued before the unit
    // is not stored either.
    let bad = WriteBatch {
        turns: vec![turn(7, "a")],
        delete_turns: vec![1],
        units: vec![StoredUnit {
            unit: Unit { id: 9, session: "a".into(), turn_ids: vec![] },
            vectors: Rows::F32(vec![1.0; 3]),
        }],
        ..Default::default()
    };
    store.write(bad).await.expect_err("a damaged vector");
    assert_eq!(store.load().await.unwrap().unblocked(), after);
    store.close();
    IdbStore::delete("t-distill").await.expect("delete");
}

#[wasm_bindgen_test]
async fn a_schema_2_database_gains_the_distillation_stores() {
    let _ = IdbStore::delete("t-v2").await;
    // Schema 2, as loci wrote it before distillation: five stores, vectors in chunks.
    let create = Function::new_no_args(
        r#"return new Promise((ok, err) => {
          const r = indexedDB.open("loci:t-v2", 2);
          r.onupgradeneeded = () => {
            const db = r.result;
            db.createObjectStore("meta");
            db.createObjectStore("vectors");
            for (const s of ["sessions", "turns", "units"]) db.createObjectStore(s, { keyPath: "id" });
          };
          r.onsuccess = () => {
            const db = r.result;
            const tx = db.transaction(["meta", "sessions", "turns"], "readwrite");
            tx.objectStore("meta").put({ schema: 2, model: "m", dim: 2, unit_mode: "pair", next_turn: 2, next_unit: 1 }, "meta");
            tx.objectStore("sessions").put({ id: "s1", firstTime: 1, lastTime: 1, turnCount: 1 });
            tx.objectStore("turns").put({ id: 1, session: "s1", seq: 0, speaker: "Maya", text: "hi", time: 1, ingested: 1 });
            tx.oncomplete = () => { db.close(); ok(); };
            tx.onerror = () => err(tx.error);
          };
          r.onerror = () => err(r.error);
        })"#,
    );
    let promise: js_sys::Promise = create.call0(&JsValue::NULL).unwrap().into();
    wasm_bindgen_futures::JsFuture::from(promise).await.expect("create a schema-2 database");

    let store = IdbStore::open("t-v2").await.expect("open");
    let first = store.load().await.expect("load schema 2").unblocked();
    assert_eq!(first.meta.as_ref().map(|m| m.schema), Some(SCHEMA_VERSION));
    assert_eq!(first.turns.len(), 1);
    assert_eq!(first.distill, Default::default());
    let mut batches = distill_batches();
    batches[0].meta = None;
    for b in batches {
        store.write(b).await.expect("distillation writes into the new stores");
    }
    let again = store.load().await.expect("load migrated").unblocked();
    assert_eq!(again.meta.as_ref().map(|m| m.schema), Some(SCHEMA_VERSION));
    assert_eq!(again.distill.episodes.len(), 2);
    store.close();
    IdbStore::delete("t-v2").await.expect("delete");
}

/// Awaits a JS function returning a promise.
async fn run_js(body: &str) -> JsValue {
    let promise: js_sys::Promise = Function::new_no_args(body).call0(&JsValue::NULL).unwrap().into();
    wasm_bindgen_futures::JsFuture::from(promise).await.expect(body)
}

#[wasm_bindgen_test]
async fn a_schema_3_database_is_packed_into_chunks() {
    let _ = IdbStore::delete("t-v3").await;
    // Schema 3, as loci wrote it before turns and units were packed: one record per turn and per unit, vectors in
    // chunks without the units.
    run_js(
        r#"return new Promise((ok, err) => {
          const r = indexedDB.open("loci:t-v3", 3);
          r.onupgradeneeded = () => {
            const db = r.result;
            db.createObjectStore("meta");
            db.createObjectStore("vectors");
            for (const s of ["sessions", "turns", "units", "episodes", "facts", "jobs"]) db.createObjectStore(s, { keyPath: "id" });
          };
          r.onsuccess = () => {
            const db = r.result;
            const tx = db.transaction(["meta", "sessions", "turns", "units", "vectors"], "readwrite");
            tx.objectStore("meta").put({ schema: 3, model: "m", dim: 2, unit_mode: "pair", next_turn: 4, next_unit: 3 }, "meta");
            tx.objectStore("sessions").put({ id: "s1", firstTime: 1, lastTime: 3, turnCount: 3 });
            const turns = tx.objectStore("turns");
            turns.put({ id: 1, session: "s1", seq: 0, speaker: "Maya", text: "I planted basil", time: 1, ingested: 1 });
            turns.put({ id: 2, session: "s1", seq: 1, speaker: "Leo", text: "nice", caption: "a pot", time: 2, ingested: 2 });
            turns.put({ id: 3, session: "s1", seq: 2, speaker: "Maya", text: "and mint", time: 3, ingested: 3 });
            tx.objectStore("units").put({ id: 1, session: "s1", turnIds: [1, 2] });
            tx.objectStore("units").put({ id: 2, session: "s1", turnIds: [3] });
            tx.objectStore("vectors").put({ dim: 2, ids: new Uint32Array([1, 2]), rows: new Uint32Array([1, 1]),
              scales: new Float32Array([0.8 / 127, 1 / 127]), codes: new Int8Array([95, 127, 127, 0]) }, 0);
            tx.oncomplete = () => { db.close(); ok(); };
            tx.onerror = () => err(tx.error);
          };
          r.onerror = () => err(r.error);
        })"#,
    )
    .await;

    install_counter();
    let store = IdbStore::open("t-v3").await.expect("open");
    let first = store.load().await.expect("load schema 3").unblocked();
    assert_eq!(first.meta.as_ref().map(|m| m.schema), Some(SCHEMA_VERSION));
    assert_eq!(first.turns.iter().map(|t| t.id).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(first.turns.to_vec()[1].caption.as_deref(), Some("a pot"));
    assert_eq!(first.units.iter().map(|u| u.unit.turn_ids.clone()).collect::<Vec<_>>(), vec![vec![1, 2], vec![3]]);
    let back = first.units[0].vectors.to_f32(2);
    assert!((back[0] - 0.6).abs() < 0.01 && (back[1] - 0.8).abs() < 0.01, "{back:?}");

    // Reopened: the same content, read from chunks alone; the old stores are empty.
    reset();
    let again = store.load().await.expect("load migrated").unblocked();
    assert_eq!(again, first);
    assert!(count("requests") <= 8, "{} requests", count("requests"));
    assert!(count("records") <= 3, "{} records: one session, one turn chunk, one vector chunk", count("records"));

    // Writes after the migration land in the chunks.
    let mut meta = again.meta.clone().unwrap();
    meta.next_turn = 5;
    meta.next_unit = 3;
    let reference = MemStore::new();
    let stored = WriteBatch {
        meta: Some(again.meta.clone().unwrap()),
        sessions: again.sessions.clone(),
        turns: again.turns.to_vec(),
        units: again.units.clone(),
        ..Default::default()
    };
    reference.write(stored).await.unwrap();
    let add = WriteBatch {
        meta: Some(meta),
        turns: vec![turn(4, "s1")],
        units: vec![StoredUnit {
            unit: Unit { id: 2, session: "s1".into(), turn_ids: vec![3, 4] },
            vectors: Rows::Int8 { codes: vec![0, 127], scales: vec![1.0 / 127.0] },
        }],
        delete_units: vec![2],
        ..Default::default()
    };
    store.write(add.clone()).await.expect("write after migration");
    reference.write(add).await.unwrap();
    store.close();
    let counts = run_js(
        r#"return new Promise((ok, err) => {
          const r = indexedDB.open("loci:t-v3");
          r.onsuccess = () => {
            const db = r.result;
            const tx = db.transaction(["turns", "units"]);
            const a = tx.objectStore("turns").count(), b = tx.objectStore("units").count();
            tx.oncomplete = () => { db.close(); ok(a.result + b.result); };
          };
          r.onerror = () => err(r.error);
        })"#,
    )
    .await;
    assert_eq!(counts.as_f64(), Some(0.0), "the schema-3 stores are emptied");
    let store = IdbStore::open("t-v3").await.expect("reopen");
    assert_eq!(store.load().await.unwrap().unblocked(), reference.load().await.unwrap().unblocked());
    store.close();

    // Turn chunks are stored in binary (schema 5: columns and an LZ4 block of the texts). A schema 4 memory (its
    // meta says 4, its chunk is a JSON array as UTF-8 bytes) and a chunk as earlier builds wrote it (the JSON as a
    // string) read the same; the schema 4 memory is reported as schema 5.
    let expected = reference.load().await.unwrap().unblocked();
    let json = serde_json::to_string(&expected.turns.to_vec()).unwrap();
    for (form, value) in [("JSON bytes, schema 4", "new TextEncoder().encode(json)"), ("a JSON string", "json")] {
        let kind = run_js(&format!(
            r#"const json = {json_literal};
            return new Promise((ok, err) => {{
              const r = indexedDB.open("loci:t-v3");
              r.onsuccess = () => {{
                const db = r.result;
                const tx = db.transaction(["turnChunks", "meta"], "readwrite");
                const chunks = tx.objectStore("turnChunks");
                const get = chunks.get(0);
                get.onsuccess = () => {{
                  const kind = get.result instanceof Uint8Array && get.result[0] === 1 ? "binary" : typeof get.result;
                  chunks.put({value}, 0);
                  const meta = tx.objectStore("meta").get("meta");
                  meta.onsuccess = () => tx.objectStore("meta").put({{ ...meta.result, schema: 4 }}, "meta");
                  tx.oncomplete = () => {{ db.close(); ok(kind); }};
                }};
                tx.onerror = () => err(tx.error);
              }};
              r.onerror = () => err(r.error);
            }})"#,
            json_literal = serde_json::to_string(&json).unwrap(),
        ))
        .await;
        assert_eq!(kind.as_string().as_deref(), Some("binary"), "before {form}: the chunk as this loci writes it");
        let store = IdbStore::open("t-v3").await.expect("reopen");
        let loaded = store.load().await.unwrap();
        assert!(loaded.quarantined.is_empty(), "{form}: {:?}", loaded.quarantined);
        assert_eq!(loaded.unblocked(), expected, "{form} reads the same (as schema 5)");
        // The next write stores the chunk in binary again.
        let more = WriteBatch { meta: expected.meta.clone(), turns: expected.turns.to_vec(), ..Default::default() };
        store.write(more).await.expect("rewrite");
        assert_eq!(store.load().await.unwrap().unblocked(), expected);
        store.close();
    }
    IdbStore::delete("t-v3").await.expect("delete");
}

// Encryption at rest (`loci::store::seal`): a memory opened with a key stores nothing readable.

const CANARY_TEXT: &str = "zebra-canary-7731 lives at 12 Quince Lane";
const CANARY_SESSION: &str = "canary-session-for-maya";

fn passphrase(p: &str) -> KeySource {
    KeySource::Passphrase(p.into())
}

/// Random-looking unit vectors (a dense pattern, so that their int8 codes are distinctive bytes to search for).
fn canary_vector(id: u32) -> Vec<f32> {
    let v: Vec<f32> = (0..DIM as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ id.wrapping_mul(40_503)) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.into_iter().map(|x| x / norm).collect()
}

/// A canary conversation: its session name and turn texts are distinctive strings, with units in two vector
/// chunks (ids 1–3 and VECTOR_CHUNK + 1), then the distillation batches.
fn canary_batches() -> Vec<WriteBatch> {
    let mut batches = distill_batches();
    let mut turns: Vec<Turn> = (10..16).map(|id| turn(id, CANARY_SESSION)).collect();
    for t in &mut turns {
        t.text = format!("{CANARY_TEXT} (turn {})", t.id);
    }
    let units = [1, 2, 3, VECTOR_CHUNK + 1]
        .iter()
        .map(|&id| StoredUnit {
            unit: Unit { id, session: CANARY_SESSION.into(), turn_ids: vec![10 + id as u64 % 6] },
            vectors: Rows::F32(canary_vector(id)),
        })
        .collect();
    batches.push(WriteBatch {
        meta: Some(Meta {
            schema: SCHEMA_VERSION,
            model: MODEL_ID.into(),
            dim: DIM as u32,
            unit_mode: UnitMode::Pair,
            next_turn: 16,
            next_unit: VECTOR_CHUNK + 2,
            embed_pending: Vec::new(),
        }),
        sessions: vec![session(CANARY_SESSION)],
        turns,
        units,
        ..Default::default()
    });
    batches
}

/// Every key and value of every object store of database `name`, as bytes (strings as UTF-8 and UTF-16, typed
/// arrays as they are, objects field by field): what someone with the disk could read.
async fn raw_database_bytes(name: &str) -> Vec<u8> {
    let body = format!(
        r#"return (async () => {{
          const req = (r) => new Promise((ok, fail) => {{ r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); }});
          const db = await req(indexedDB.open({name:?}));
          const parts = [];
          const utf8 = new TextEncoder();
          const add = (v) => {{
            if (v === null || v === undefined) return;
            if (typeof v === "string") {{
              parts.push(utf8.encode(v));
              parts.push(new Uint8Array(Uint16Array.from(v, (c) => c.charCodeAt(0)).buffer));
            }} else if (typeof v === "number" || typeof v === "boolean") parts.push(utf8.encode(String(v)));
            else if (ArrayBuffer.isView(v)) parts.push(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
            else if (v instanceof ArrayBuffer) parts.push(new Uint8Array(v));
            else if (Array.isArray(v)) v.forEach(add);
            else if (typeof v === "object") for (const [k, x] of Object.entries(v)) {{ add(k); add(x); }}
          }};
          for (const store of db.objectStoreNames) {{
            const os = db.transaction(store).objectStore(store);
            const [keys, values] = await Promise.all([req(os.getAllKeys()), req(os.getAll())]);
            keys.forEach(add);
            values.forEach(add);
          }}
          db.close();
          const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
          let at = 0;
          for (const p of parts) {{ out.set(p, at); at += p.length; }}
          return out;
        }})()"#
    );
    js_sys::Uint8Array::new(&run_js(&body).await).to_vec()
}

fn occurrences(haystack: &[u8], needle: &[u8]) -> usize {
    haystack.windows(needle.len()).filter(|w| *w == needle).count()
}

/// How often the canary's strings and 24-byte runs of its vectors' int8 codes occur in `bytes`.
fn canary_hits(bytes: &[u8]) -> (usize, usize) {
    let text = occurrences(bytes, b"zebra-canary") + occurrences(bytes, CANARY_SESSION.as_bytes());
    let vectors = [1, 2, 3, VECTOR_CHUNK + 1]
        .iter()
        .map(|&id| {
            let (codes, _) = Rows::F32(canary_vector(id)).to_int8(DIM);
            let codes: Vec<u8> = codes.iter().map(|&c| c as u8).collect();
            codes.chunks_exact(24).map(|run| occurrences(bytes, run)).sum::<usize>()
        })
        .sum();
    (text, vectors)
}

#[wasm_bindgen_test]
async fn an_encrypted_memory_round_trips_and_stores_no_plaintext() {
    for name in ["t-plain-canary", "t-enc"] {
        let _ = IdbStore::delete(name).await;
    }
    let key = passphrase("correct horse battery staple");
    let plain = IdbStore::open("t-plain-canary").await.expect("open plaintext");
    let store = IdbStore::open_with("t-enc", Default::default(), Some(&key)).await.expect("create encrypted");
    assert!(store.is_encrypted() && !plain.is_encrypted());
    let reference = MemStore::new();
    for batch in canary_batches() {
        plain.write(batch.clone()).await.expect("plaintext write");
        store.write(batch.clone()).await.expect("encrypted write");
        reference.write(batch).await.expect("mem write");
    }
    // A kept lexical index holds the memory's words: sealed like the rest.
    let lexical = format!("{CANARY_TEXT} {CANARY_SESSION}").into_bytes();
    for s in [&plain, &store] {
        s.put_lexical(lexical.len(), &|sink| sink(&lexical)).await.expect("put the lexical index");
    }
    // The plaintext store is the reference (it holds vectors as int8, as the encrypted one does); it holds what
    // MemStore holds.
    let expected = plain.load().await.expect("plaintext load").unblocked();
    let mem = reference.load().await.unwrap().unblocked();
    assert_eq!((&expected.sessions, &expected.turns, &expected.distill), (&mem.sessions, &mem.turns, &mem.distill));
    assert_eq!(expected.units.len(), 4);
    assert_eq!(store.load().await.expect("encrypted load").unblocked(), expected);
    assert_eq!(store.load_lexical().await.expect("sealed lexical index"), Some(lexical.clone()));
    plain.close();
    store.close();

    // The scanner finds the canary where it is stored in plaintext (so a 0 below means something) …
    let (text, vectors) = canary_hits(&raw_database_bytes("loci:t-plain-canary").await);
    assert!(text > 0 && vectors > 0, "the scan finds the plaintext canary: {text} text, {vectors} vector hits");
    // … and finds none of it in the encrypted database.
    assert_eq!(canary_hits(&raw_database_bytes("loci:t-enc").await), (0, 0), "canary hits at rest");

    // A wrong key, or none, is BAD_KEY and changes nothing; a key does not encrypt a plaintext memory.
    let wrong = IdbStore::open_with("t-enc", Default::default(), Some(&passphrase("wrong"))).await;
    assert_eq!(wrong.err().map(|e| e.code()), Some("BAD_KEY"));
    let none = IdbStore::open("t-enc").await;
    assert_eq!(none.err().map(|e| e.code()), Some("BAD_KEY"));
    let keyed_plain = IdbStore::open_with("t-plain-canary", Default::default(), Some(&key)).await;
    assert_eq!(keyed_plain.err().map(|e| e.code()), Some("INVALID_INPUT"));
    IdbStore::check_key("t-enc", Some(&key)).await.expect("the right key checks");
    assert_eq!(IdbStore::check_key("t-enc", None).await.err().map(|e| e.code()), Some("BAD_KEY"));
    let store = IdbStore::open_with("t-enc", Default::default(), Some(&key)).await.expect("reopen");
    assert_eq!(store.load().await.unwrap().unblocked(), expected, "reopened with the key, unchanged");

    // Changing the key: the old one no longer opens it, the new one does, and the content is the same.
    let next = passphrase("a new passphrase");
    assert_eq!(store.change_key(&passphrase("wrong"), &next).await.err().map(|e| e.code()), Some("BAD_KEY"));
    store.change_key(&key, &next).await.expect("change the key");
    store.close();
    let old = IdbStore::open_with("t-enc", Default::default(), Some(&key)).await;
    assert_eq!(old.err().map(|e| e.code()), Some("BAD_KEY"));
    let store = IdbStore::open_with("t-enc", Default::default(), Some(&next)).await.expect("open with the new key");
    assert_eq!(store.load().await.unwrap().unblocked(), expected);

    // Emptied (forgetAll), it stays encrypted under the same key.
    store.clear().await.expect("clear");
    store.write(canary_batches().pop().unwrap()).await.expect("write after clear");
    store.close();
    let none = IdbStore::open("t-enc").await;
    assert_eq!(none.err().map(|e| e.code()), Some("BAD_KEY"));
    let store = IdbStore::open_with("t-enc", Default::default(), Some(&next)).await.expect("open after clear");
    assert_eq!(store.load().await.unwrap().unblocked().turns.len(), 6);
    store.close();
    for name in ["t-plain-canary", "t-enc"] {
        IdbStore::delete(name).await.expect("delete");
    }
}

#[wasm_bindgen_test]
async fn tampered_records_are_set_aside_and_the_rest_opens() {
    let _ = IdbStore::delete("t-tamper").await;
    let key = passphrase("tamper test");
    let store = IdbStore::open_with("t-tamper", Default::default(), Some(&key)).await.expect("create");
    for batch in canary_batches() {
        store.write(batch).await.expect("write");
    }
    let expected = store.load().await.unwrap().unblocked();
    store.close();
    // Flip a byte of the turn chunk 0's ciphertext; swap the two vector chunks; swap the sealed contents of
    // episodes 1 and 2 (their ids stay).
    run_js(
        r#"return (async () => {
          const req = (r) => new Promise((ok, fail) => { r.onsuccess = () => ok(r.result); r.onerror = () => fail(r.error); });
          const db = await req(indexedDB.open("loci:t-tamper"));
          const tx = db.transaction(["turnChunks", "vectors", "episodes"], "readwrite");
          const turns = tx.objectStore("turnChunks"), vectors = tx.objectStore("vectors"), episodes = tx.objectStore("episodes");
          const t0 = await req(turns.get(0));
          t0[20] ^= 1;
          turns.put(t0, 0);
          const [v0, v1] = [await req(vectors.get(0)), await req(vectors.get(1))];
          vectors.put(v1, 0);
          vectors.put(v0, 1);
          const [e1, e2] = [await req(episodes.get(1)), await req(episodes.get(2))];
          episodes.put({ id: 1, c: e2.c });
          episodes.put({ id: 2, c: e1.c });
          await new Promise((ok) => (tx.oncomplete = ok));
          db.close();
        })()"#,
    )
    .await;
    let store = IdbStore::open_with("t-tamper", Default::default(), Some(&key)).await.expect("reopen");
    let loaded = store.load().await.expect("the rest opens").unblocked();
    let mut set_aside: Vec<(String, String)> =
        loaded.quarantined.iter().map(|q| (q.store.clone(), q.key.clone())).collect();
    set_aside.sort();
    let expect = |s: &str, k: &str| (s.to_string(), k.to_string());
    assert_eq!(
        set_aside,
        vec![
            expect("episodes", "1"),
            expect("episodes", "2"),
            expect("turnChunks", "0"),
            expect("vectors", "0"),
            expect("vectors", "1")
        ],
        "every tampered record is detected: {:?}",
        loaded.quarantined
    );
    assert!(loaded.quarantined.iter().all(|q| q.reason.contains("failed authentication")), "{:?}", loaded.quarantined);
    // What was not touched reads back as written.
    assert_eq!(loaded.sessions, expected.sessions);
    assert_eq!(loaded.distill.facts, expected.distill.facts);
    assert_eq!(loaded.distill.jobs, expected.distill.jobs);
    assert!(loaded.turns.is_empty() && loaded.units.is_empty() && loaded.distill.episodes.is_empty());
    store.close();
    IdbStore::delete("t-tamper").await.expect("delete");
}
