//! Encryption at rest (optional, off by default): every record a memory stores in IndexedDB is sealed with
//! AES-256-GCM through WebCrypto, under a fresh random 96-bit IV, with the record's store and key bound as additional
//! data, so that an altered, swapped or moved record fails to open.
//!
//! Envelope encryption, as disk encryption does it: the records are sealed with random key material (an AES-GCM key
//! and an HMAC key for hashing session ids, 64 bytes drawn once per memory). That material is stored only wrapped
//! (AES-GCM) by a key-encryption key: PBKDF2-SHA256 over the user's passphrase (600,000 iterations, OWASP's 2023
//! figure, with a random 16-byte salt) or a `CryptoKey` the app holds. So a wrong passphrase is told at once (the
//! wrapped material does not open: `BAD_KEY`), and changing the passphrase rewrites one record in one transaction:
//! interrupted, the old passphrase still opens the memory; committed, the new one does.
//!
//! PBKDF2 rather than Argon2id: it is native in every browser's WebCrypto (fast there, no wasm to ship and no
//! memory-hard allocation in the page), and the material it derives never leaves WebCrypto. The derived key and
//! the record keys are non-extractable `CryptoKey`s; the raw material exists in wasm memory only while it is
//! wrapped or unwrapped.
//!
//! AES-GCM with random IVs is safe for about 2^32 seals per key (NIST SP 800-38D); a memory rewrites a few records
//! per write, so that is millions of writes.

use js_sys::{Object, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{CryptoKey, SubtleCrypto};

use crate::error::{Error, Result};

/// PBKDF2-SHA256 iterations for a passphrase (OWASP 2023). Stored in the key record, so it can rise later.
pub const PBKDF2_ITERATIONS: u32 = 600_000;
const IV_BYTES: usize = 12;
const TAG_BYTES: usize = 16;
const SALT_BYTES: usize = 16;
/// 32 bytes of AES-256-GCM key, then 32 of HMAC-SHA256 key.
const MATERIAL_BYTES: usize = 64;
const KEY_RECORD_FORMAT: u32 = 1;
const KDF_PASSPHRASE: &str = "PBKDF2-SHA256";
const KDF_APP_KEY: &str = "app-key";

/// How the app unlocks an encrypted memory.
#[derive(Clone)]
pub enum KeySource {
    Passphrase(String),
    /// An AES-GCM `CryptoKey` with `encrypt` and `decrypt` usages (it may be non-extractable).
    Key(CryptoKey),
}

impl KeySource {
    /// Parses `{ passphrase }` or `{ key }` (what `encryption` and `changePassphrase` take), or a bare string or
    /// `CryptoKey`.
    pub fn from_js(v: &JsValue, what: &str) -> Result<KeySource> {
        if let Some(p) = v.as_string() {
            return Self::passphrase(p, what);
        }
        if let Some(k) = v.dyn_ref::<CryptoKey>() {
            return Self::key(k.clone(), what);
        }
        if !v.is_object() {
            return Err(Error::invalid(format!("{what} must be {{ passphrase }} or {{ key: CryptoKey }}")));
        }
        let field = |name: &str| Reflect::get(v, &name.into()).ok().filter(|x| !x.is_undefined() && !x.is_null());
        match (field("passphrase"), field("key")) {
            (Some(p), None) => match p.as_string() {
                Some(p) => Self::passphrase(p, what),
                None => Err(Error::invalid(format!("{what}: `passphrase` must be a string"))),
            },
            (None, Some(k)) => match k.dyn_into::<CryptoKey>() {
                Ok(k) => Self::key(k, what),
                Err(_) => Err(Error::invalid(format!("{what}: `key` must be a CryptoKey"))),
            },
            _ => Err(Error::invalid(format!("{what} needs exactly one of `passphrase` and `key`"))),
        }
    }

    fn passphrase(p: String, what: &str) -> Result<KeySource> {
        match p.is_empty() {
            true => Err(Error::invalid(format!("{what}: the passphrase is empty"))),
            false => Ok(KeySource::Passphrase(p)),
        }
    }

    fn key(k: CryptoKey, what: &str) -> Result<KeySource> {
        let algorithm =
            k.algorithm().ok().and_then(|a| Reflect::get(&a, &"name".into()).ok()).and_then(|n| n.as_string());
        let usages: Vec<String> = k.usages().iter().filter_map(|u| u.as_string()).collect();
        if algorithm.as_deref() != Some("AES-GCM")
            || !["encrypt", "decrypt"].iter().all(|u| usages.iter().any(|x| x == u))
        {
            return Err(Error::invalid(format!(
                "{what}: `key` must be an AES-GCM CryptoKey with encrypt and decrypt usages"
            )));
        }
        Ok(KeySource::Key(k))
    }

    fn kdf(&self) -> &'static str {
        match self {
            KeySource::Passphrase(_) => KDF_PASSPHRASE,
            KeySource::Key(_) => KDF_APP_KEY,
        }
    }
}

fn subtle() -> Result<SubtleCrypto> {
    let crypto = Reflect::get(&js_sys::global(), &"crypto".into())
        .ok()
        .and_then(|c| c.dyn_into::<web_sys::Crypto>().ok())
        .ok_or_else(|| Error::Unsupported("WebCrypto is missing: encryption needs it".into()))?;
    let subtle = crypto.subtle();
    if JsValue::from(subtle.clone()).is_undefined() {
        return Err(Error::Unsupported(
            "crypto.subtle is missing: serve the page from a secure context (https:// or localhost)".into(),
        ));
    }
    Ok(subtle)
}

/// `n` bytes from the browser's CSPRNG.
pub(crate) fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let crypto = Reflect::get(&js_sys::global(), &"crypto".into())
        .ok()
        .and_then(|c| c.dyn_into::<web_sys::Crypto>().ok())
        .ok_or_else(|| Error::Unsupported("WebCrypto is missing: encryption needs it".into()))?;
    let mut out = vec![0u8; n];
    crypto.get_random_values_with_u8_array(&mut out).map_err(|e| Error::Storage(format!("getRandomValues: {e:?}")))?;
    Ok(out)
}

fn crypto_failed(what: &str, e: JsValue) -> Error {
    let name = Reflect::get(&e, &"name".into()).ok().and_then(|n| n.as_string()).unwrap_or_default();
    Error::Storage(format!("{what}: {name}"))
}

async fn resolve(p: std::result::Result<js_sys::Promise, JsValue>) -> std::result::Result<JsValue, JsValue> {
    JsFuture::from(p?).await
}

fn object(fields: &[(&str, &JsValue)]) -> Object {
    let o = Object::new();
    for (k, v) in fields {
        let _ = Reflect::set(&o, &(*k).into(), v);
    }
    o
}

fn usages(list: &[&str]) -> JsValue {
    list.iter().map(|u| JsValue::from(*u)).collect::<js_sys::Array>().into()
}

fn gcm_params(iv: &[u8], aad: &[u8]) -> Object {
    object(&[
        ("name", &"AES-GCM".into()),
        ("iv", &Uint8Array::from(iv).into()),
        ("additionalData", &Uint8Array::from(aad).into()),
    ])
}

async fn gcm_encrypt(key: &CryptoKey, iv: &[u8], aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
    Ok(gcm_encrypt_js(key, iv, aad, Plain::Wasm(plain)).await?.to_vec())
}

/// What a record is sealed from: bytes in the wasm heap (WebCrypto reads them through a view and copies them
/// itself), or a JS array (a large record that never entered the heap, which keeps its high-water mark).
enum Plain<'a> {
    Wasm(&'a [u8]),
    Js(&'a Uint8Array),
}

/// [`gcm_encrypt`] into a JS array: the ciphertext does not pass through the wasm heap.
async fn gcm_encrypt_js(key: &CryptoKey, iv: &[u8], aad: &[u8], plain: Plain<'_>) -> Result<Uint8Array> {
    let (subtle, params) = (subtle()?, gcm_params(iv, aad));
    let promise = match plain {
        Plain::Wasm(bytes) => subtle.encrypt_with_object_and_u8_array(&params, key, bytes),
        Plain::Js(array) => subtle.encrypt_with_object_and_js_u8_array(&params, key, array),
    };
    let out = resolve(promise).await.map_err(|e| crypto_failed("encrypting a record", e))?;
    Ok(Uint8Array::new(&out))
}

/// `None` when the ciphertext does not authenticate (wrong key, altered or moved).
async fn gcm_decrypt(key: &CryptoKey, iv: &[u8], aad: &[u8], sealed: &[u8]) -> Result<Option<Vec<u8>>> {
    gcm_decrypt_js(key, iv, aad, &Uint8Array::from(sealed)).await
}

/// [`gcm_decrypt`] of a JS array: only the plaintext is copied into the wasm heap.
async fn gcm_decrypt_js(key: &CryptoKey, iv: &[u8], aad: &[u8], sealed: &Uint8Array) -> Result<Option<Vec<u8>>> {
    match resolve(subtle()?.decrypt_with_object_and_js_u8_array(&gcm_params(iv, aad), key, sealed)).await {
        Ok(out) => Ok(Some(Uint8Array::new(&out).to_vec())),
        Err(e)
            if Reflect::get(&e, &"name".into()).ok().and_then(|n| n.as_string()).as_deref()
                == Some("OperationError") =>
        {
            Ok(None)
        }
        Err(e) => Err(crypto_failed("decrypting a record", e)),
    }
}

async fn import_raw(bytes: &[u8], algorithm: &Object, uses: &[&str]) -> Result<CryptoKey> {
    let key =
        resolve(subtle()?.import_key_with_object("raw", &Uint8Array::from(bytes), algorithm, false, &usages(uses)))
            .await
            .map_err(|e| crypto_failed("importing a key", e))?;
    key.dyn_into::<CryptoKey>().map_err(|_| Error::Storage("importing a key: not a CryptoKey".into()))
}

/// The key-encryption key: PBKDF2 over the passphrase, or the app's key as it is.
async fn key_encryption_key(source: &KeySource, salt: &[u8], iterations: u32) -> Result<CryptoKey> {
    match source {
        KeySource::Key(k) => Ok(k.clone()),
        KeySource::Passphrase(p) => {
            let base = import_raw(p.as_bytes(), &object(&[("name", &"PBKDF2".into())]), &["deriveKey"]).await?;
            let params = object(&[
                ("name", &"PBKDF2".into()),
                ("salt", &Uint8Array::from(salt).into()),
                ("iterations", &JsValue::from(iterations)),
                ("hash", &"SHA-256".into()),
            ]);
            let derived = object(&[("name", &"AES-GCM".into()), ("length", &JsValue::from(256))]);
            let key = resolve(subtle()?.derive_key_with_object_and_object(
                &params,
                &base,
                &derived,
                false,
                &usages(&["encrypt", "decrypt"]),
            ))
            .await
            .map_err(|e| crypto_failed("deriving the key from the passphrase", e))?;
            key.dyn_into::<CryptoKey>().map_err(|_| Error::Storage("deriving a key: not a CryptoKey".into()))
        }
    }
}

/// The plaintext record (in `meta`, key `"key"`) that says a memory is encrypted and how to unlock it: the KDF,
/// its salt and iterations, and the wrapped key material. Nothing in it depends on the memory's content.
struct KeyRecord {
    kdf: String,
    salt: Vec<u8>,
    iterations: u32,
    iv: Vec<u8>,
    wrapped: Vec<u8>,
}

impl KeyRecord {
    fn to_js(&self) -> JsValue {
        object(&[
            ("format", &JsValue::from(KEY_RECORD_FORMAT)),
            ("kdf", &self.kdf.as_str().into()),
            ("salt", &Uint8Array::from(self.salt.as_slice()).into()),
            ("iterations", &JsValue::from(self.iterations)),
            ("iv", &Uint8Array::from(self.iv.as_slice()).into()),
            ("wrapped", &Uint8Array::from(self.wrapped.as_slice()).into()),
        ])
        .into()
    }

    fn from_js(v: &JsValue) -> Result<KeyRecord> {
        let damaged = || Error::Storage("the memory's key record is damaged".into());
        let bytes = |f: &str| {
            Reflect::get(v, &f.into())
                .ok()
                .and_then(|x| x.dyn_into::<Uint8Array>().ok())
                .map(|a| a.to_vec())
                .ok_or_else(damaged)
        };
        let format = Reflect::get(v, &"format".into()).ok().and_then(|f| f.as_f64());
        if format != Some(KEY_RECORD_FORMAT as f64) {
            return Err(Error::SchemaMismatch("the memory's key record has a format this loci does not know".into()));
        }
        Ok(KeyRecord {
            kdf: Reflect::get(v, &"kdf".into()).ok().and_then(|k| k.as_string()).ok_or_else(damaged)?,
            salt: bytes("salt")?,
            iterations: Reflect::get(v, &"iterations".into()).ok().and_then(|i| i.as_f64()).ok_or_else(damaged)? as u32,
            iv: bytes("iv")?,
            wrapped: bytes("wrapped")?,
        })
    }

    /// The record as the sync server keeps it (docs/SYNC.md, "Keys"): the same fields, as JSON.
    fn to_bytes(&self) -> Result<Vec<u8>> {
        let record = KeyRecordBytes {
            format: KEY_RECORD_FORMAT,
            kdf: self.kdf.clone(),
            salt: self.salt.clone(),
            iterations: self.iterations,
            iv: self.iv.clone(),
            wrapped: self.wrapped.clone(),
        };
        serde_json::to_vec(&record).map_err(|e| Error::SyncFailed(format!("encoding the key record: {e}")))
    }

    fn from_bytes(bytes: &[u8]) -> Result<KeyRecord> {
        let r: KeyRecordBytes = serde_json::from_slice(bytes)
            .map_err(|e| Error::SyncFailed(format!("the server's key record is damaged: {e}")))?;
        if r.format != KEY_RECORD_FORMAT {
            return Err(Error::SchemaMismatch("the server's key record has a format this loci does not know".into()));
        }
        Ok(KeyRecord { kdf: r.kdf, salt: r.salt, iterations: r.iterations, iv: r.iv, wrapped: r.wrapped })
    }

    /// Wraps `material` for `source`, with a fresh salt and IV.
    async fn wrap(material: &[u8], source: &KeySource, database: &str) -> Result<KeyRecord> {
        let salt = match source {
            KeySource::Passphrase(_) => random_bytes(SALT_BYTES)?,
            KeySource::Key(_) => Vec::new(),
        };
        let iterations = match source {
            KeySource::Passphrase(_) => PBKDF2_ITERATIONS,
            KeySource::Key(_) => 0,
        };
        let kek = key_encryption_key(source, &salt, iterations).await?;
        let iv = random_bytes(IV_BYTES)?;
        let wrapped = gcm_encrypt(&kek, &iv, &Self::aad(database), material).await?;
        Ok(KeyRecord { kdf: source.kdf().into(), salt, iterations, iv, wrapped })
    }

    /// The key material, or `BAD_KEY` when `source` does not open it.
    async fn unwrap(&self, source: &KeySource, database: &str) -> Result<Vec<u8>> {
        if self.kdf != source.kdf() {
            let how = match self.kdf.as_str() {
                KDF_PASSPHRASE => "a passphrase",
                _ => "a CryptoKey",
            };
            return Err(Error::BadKey(format!("this memory is unlocked with {how}")));
        }
        let kek = key_encryption_key(source, &self.salt, self.iterations).await?;
        match gcm_decrypt(&kek, &self.iv, &Self::aad(database), &self.wrapped).await? {
            Some(m) if m.len() == MATERIAL_BYTES => Ok(m),
            _ => Err(Error::BadKey("the passphrase or key does not open this memory".into())),
        }
    }

    fn aad(database: &str) -> Vec<u8> {
        format!("loci-key/1\u{0}{database}").into_bytes()
    }
}

/// [`KeyRecord`] as JSON bytes.
#[derive(serde::Serialize, serde::Deserialize)]
struct KeyRecordBytes {
    format: u32,
    kdf: String,
    salt: Vec<u8>,
    iterations: u32,
    iv: Vec<u8>,
    wrapped: Vec<u8>,
}

/// Seals and opens the records of one encrypted memory.
pub struct Sealer {
    aes: CryptoKey,
    hmac: CryptoKey,
}

impl Sealer {
    /// New key material for a new memory, wrapped for `source`: the sealer, and the key record to store.
    pub async fn create(source: &KeySource, database: &str) -> Result<(Sealer, JsValue)> {
        let material = random_bytes(MATERIAL_BYTES)?;
        let record = KeyRecord::wrap(&material, source, database).await?;
        Ok((Self::from_material(&material).await?, record.to_js()))
    }

    /// Unlocks a memory from its key record: `BAD_KEY` when `source` does not open it.
    pub async fn unlock(source: &KeySource, database: &str, record: &JsValue) -> Result<Sealer> {
        let material = KeyRecord::from_js(record)?.unwrap(source, database).await?;
        Self::from_material(&material).await
    }

    /// The key record re-wrapped for `next`, once `current` has opened it (`BAD_KEY` otherwise). The records
    /// themselves stay sealed with the same material.
    pub async fn rewrap(record: &JsValue, current: &KeySource, next: &KeySource, database: &str) -> Result<JsValue> {
        let material = KeyRecord::from_js(record)?.unwrap(current, database).await?;
        Ok(KeyRecord::wrap(&material, next, database).await?.to_js())
    }

    async fn from_material(material: &[u8]) -> Result<Sealer> {
        let aes = import_raw(&material[..32], &object(&[("name", &"AES-GCM".into())]), &["encrypt", "decrypt"]).await?;
        let hmac_params = object(&[("name", &"HMAC".into()), ("hash", &"SHA-256".into())]);
        let hmac = import_raw(&material[32..], &hmac_params, &["sign"]).await?;
        Ok(Sealer { aes, hmac })
    }

    fn aad(store: &str, key: &str) -> Vec<u8> {
        format!("loci-record/1\u{0}{store}\u{0}{key}").into_bytes()
    }

    /// `plain` sealed for slot (`store`, `key`): IV ‖ ciphertext ‖ tag.
    pub async fn seal(&self, store: &str, key: &str, plain: &[u8]) -> Result<Uint8Array> {
        self.seal_plain(store, key, Plain::Wasm(plain)).await
    }

    /// [`seal`](Self::seal) of a JS array: neither the plaintext nor the ciphertext enters the wasm heap.
    pub async fn seal_js(&self, store: &str, key: &str, plain: &Uint8Array) -> Result<Uint8Array> {
        self.seal_plain(store, key, Plain::Js(plain)).await
    }

    async fn seal_plain(&self, store: &str, key: &str, plain: Plain<'_>) -> Result<Uint8Array> {
        let iv = random_bytes(IV_BYTES)?;
        let sealed = gcm_encrypt_js(&self.aes, &iv, &Self::aad(store, key), plain).await?;
        let out = Uint8Array::new_with_length(IV_BYTES as u32 + sealed.length());
        out.subarray(0, IV_BYTES as u32).copy_from(&iv);
        out.set(&sealed, IV_BYTES as u32);
        Ok(out)
    }

    /// What was sealed for slot (`store`, `key`); an error that says so when the record was altered, moved from
    /// another slot, or sealed under another key.
    pub async fn open(&self, store: &str, key: &str, record: &JsValue) -> Result<Vec<u8>> {
        // Read where it lies (a JS array): only the plaintext is copied into the wasm heap.
        let bytes = record
            .dyn_ref::<Uint8Array>()
            .cloned()
            .or_else(|| Reflect::get(record, &"c".into()).ok().and_then(|c| c.dyn_into::<Uint8Array>().ok()))
            .ok_or_else(|| Error::Storage("not an encrypted record".into()))?;
        if (bytes.length() as usize) < IV_BYTES + TAG_BYTES {
            return Err(Error::Storage("an encrypted record is truncated".into()));
        }
        let iv = bytes.subarray(0, IV_BYTES as u32).to_vec();
        let sealed = bytes.subarray(IV_BYTES as u32, bytes.length());
        gcm_decrypt_js(&self.aes, &iv, &Self::aad(store, key), &sealed).await?.ok_or_else(|| {
            Error::Storage("an encrypted record failed authentication (altered, or moved from another slot)".into())
        })
    }

    /// A keyed hash of an id that would say something in plaintext (a session id): the same id always hashes
    /// alike within one memory, and reveals nothing without its key.
    pub async fn hash_id(&self, id: &str) -> Result<String> {
        let params = object(&[("name", &"HMAC".into())]);
        let mac = resolve(subtle()?.sign_with_object_and_u8_array(&params, &self.hmac, id.as_bytes()))
            .await
            .map_err(|e| crypto_failed("hashing an id", e))?;
        let mac = Uint8Array::new(&mac).to_vec();
        Ok(mac[..16].iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// Where a memory's key record binds its database's name, the sync key record binds this (a database's name is
/// `loci:…`, so the two never meet).
const SYNC_KEY_LABEL: &str = "loci-sync";

/// The sync key from the user's sync passphrase or key (docs/SYNC.md, "Keys"): material drawn by the first device
/// and kept on the server only wrapped, exactly as a memory's own is at rest. The key is a [`Sealer`]: the same
/// non-extractable AES-GCM key, used with the sync's additional data (`loci-sync-…`), never a record's.
pub struct SyncUnlock(pub KeySource);

#[async_trait::async_trait(?Send)]
impl crate::sync::Unlock for SyncUnlock {
    type Key = Sealer;

    async fn create(&self) -> Result<(Sealer, Vec<u8>)> {
        let material = random_bytes(MATERIAL_BYTES)?;
        let record = KeyRecord::wrap(&material, &self.0, SYNC_KEY_LABEL).await?;
        Ok((Sealer::from_material(&material).await?, record.to_bytes()?))
    }

    async fn unlock(&self, record: &[u8]) -> Result<Sealer> {
        let material = KeyRecord::from_bytes(record)?.unwrap(&self.0, SYNC_KEY_LABEL).await?;
        Sealer::from_material(&material).await
    }
}

#[async_trait::async_trait(?Send)]
impl crate::sync::Cipher for Sealer {
    async fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let iv = random_bytes(IV_BYTES)?;
        let sealed = gcm_encrypt(&self.aes, &iv, aad, plain).await?;
        Ok([iv, sealed].concat())
    }

    async fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Option<Vec<u8>>> {
        if sealed.len() < IV_BYTES + TAG_BYTES {
            return Ok(None);
        }
        let (iv, body) = sealed.split_at(IV_BYTES);
        gcm_decrypt(&self.aes, iv, aad, body).await
    }
}
