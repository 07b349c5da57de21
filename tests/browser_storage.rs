//! Headless Chromium: the IndexedDB layout stays bulk. A regression guard that is not a timing: it counts the
//! IndexedDB requests (by wrapping `IDBObjectStore.prototype` in the page) and the records they return.
#![cfg(target_arch = "wasm32")]

use js_sys::{Function, Reflect};
use loci::embed::{DIM, MODEL_ID};
use loci::store::idb::IdbStore;
use loci::store::{Meta, Rows, Store, StoredUnit, WriteBatch, SCHEMA_VERSION, VECTOR_CHUNK};
use loci::types::{Unit, UnitMode};
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
    let _ = IdbStore::delete("t-bulk").await;
    install_counter();
    let store = IdbStore::open("t-bulk").await.expect("open");
    let meta = Meta {
        schema: SCHEMA_VERSION,
        model: MODEL_ID.into(),
        dim: DIM as u32,
        unit_mode: UnitMode::Pair,
        next_turn: 1,
        next_unit: N + 1,
    };
    for start in (1..=N).step_by(5000) {
        let units = (start..(start + 5000).min(N + 1))
            .map(|id| StoredUnit {
                unit: Unit { id, session: format!("s{}", id / 10), turn_ids: vec![] },
                vectors: Rows::F32(vector(id)),
            })
            .collect();
        store.write(WriteBatch { meta: Some(meta.clone()), units, ..Default::default() }).await.expect("write");
    }

    // Open: one request per object store, whatever the number of units; vectors arrive as chunk records.
    reset();
    let snapshot = store.load().await.expect("load");
    assert_eq!(snapshot.units.len(), N as usize);
    let chunks = N / VECTOR_CHUNK + 1;
    assert!(count("requests") <= 5, "{} IndexedDB requests to open", count("requests"));
    assert_eq!(count("vectorRequests"), 1);
    assert!(count("records") <= N + chunks, "{} records read", count("records"));
    let u = &snapshot.units[12_345];
    let back = u.vectors.to_f32(DIM);
    assert!((back[u.unit.id as usize % DIM] - 1.0).abs() < 0.01, "unit {} vector is not its own", u.unit.id);

    // A write of one unit touches one vector chunk: one read and one put, not a rewrite of everything.
    reset();
    let unit = StoredUnit {
        unit: Unit { id: N + 1, session: "s".into(), turn_ids: vec![] },
        vectors: Rows::F32(vector(N + 1)),
    };
    store
        .write(WriteBatch { units: vec![unit], delete_units: vec![N], ..Default::default() })
        .await
        .expect("write one");
    assert!(count("vectorRequests") <= 4, "{} vector requests for one unit", count("vectorRequests"));
    let snapshot = store.load().await.expect("reload");
    assert_eq!(snapshot.units.len(), N as usize);
    assert!(snapshot.units.iter().any(|u| u.unit.id == N + 1) && !snapshot.units.iter().any(|u| u.unit.id == N));
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
    let first = store.load().await.expect("load schema 1");
    assert_eq!(first.meta.as_ref().map(|m| m.schema), Some(SCHEMA_VERSION));
    assert_eq!(first.units[0].vectors, Rows::F32(vec![0.6, 0.8]));
    let again = store.load().await.expect("load migrated");
    assert_eq!(again.meta.as_ref().map(|m| m.schema), Some(SCHEMA_VERSION));
    assert!(matches!(again.units[0].vectors, Rows::Int8 { .. }), "vectors moved into a chunk");
    let back = again.units[0].vectors.to_f32(2);
    assert!((back[0] - 0.6).abs() < 0.01 && (back[1] - 0.8).abs() < 0.01, "{back:?}");
    store.close();
    IdbStore::delete("t-v1").await.expect("delete");
}
