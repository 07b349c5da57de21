//! A WebDAV folder (RFC 4918) as the sync [`Remote`](crate::sync::Remote): `PROPFIND` (depth 1) lists a folder,
//! `GET` reads a file, and a write is `MKCOL` of its folders, `PUT` under `tmp/`, then `MOVE` into place without
//! overwriting (`Overwrite: F`), so that a reader never sees half a file and nothing is ever replaced. Written once over a one-call [`Transport`]: `fetch` in the browser, `ureq`
//! natively (tests and tools), so the native test against a real server checks the browser's protocol too.

use async_trait::async_trait;
use percent_encoding::percent_decode_str;
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::error::{Error, Result};
use crate::sync::Remote;

/// What `PROPFIND` asks for: only whether each entry is a folder (the names come with every response).
pub const PROPFIND_BODY: &str = r#"<?xml version="1.0" encoding="utf-8"?><d:propfind xmlns:d="DAV:"><d:prop><d:resourcetype/></d:prop></d:propfind>"#;

/// The names in a depth-1 `PROPFIND` answer (a multistatus), without the listed folder's own entry: each
/// `href`'s last part, percent-decoded.
pub fn multistatus_names(xml: &str) -> Result<Vec<String>> {
    let bad = |e: &dyn std::fmt::Display| Error::SyncFailed(format!("the server's folder listing: {e}"));
    let mut reader = Reader::from_str(xml);
    let (mut hrefs, mut in_href) = (Vec::<String>::new(), false);
    // A listing cut short, or another page (a proxy's login form), must not read as a folder with fewer files.
    let (mut depth, mut multistatus) = (0usize, false);
    loop {
        match reader.read_event().map_err(|e| bad(&e))? {
            Event::Start(e) => {
                multistatus |= depth == 0 && e.local_name().as_ref() == b"multistatus";
                depth += 1;
                if e.local_name().as_ref() == b"href" {
                    in_href = true;
                    hrefs.push(String::new());
                }
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                in_href = false;
            }
            Event::Text(t) if in_href => {
                if let Some(href) = hrefs.last_mut() {
                    href.push_str(&t.decode().map_err(|e| bad(&e))?);
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !multistatus || depth != 0 {
        return Err(bad(&"not a whole multistatus"));
    }
    let paths: Vec<String> = hrefs
        .iter()
        .map(|h| percent_decode_str(h.trim()).decode_utf8_lossy().trim_end_matches('/').to_string())
        .collect();
    // The folder's own entry is the shortest: every other one is inside it.
    let Some(own) = paths.iter().map(String::len).min() else { return Ok(Vec::new()) };
    Ok(paths
        .iter()
        .filter(|p| p.len() > own)
        .filter_map(|p| p.rsplit('/').next())
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect())
}

/// The folders a file at `path` sits in, outermost first: `a/b/c` → `a`, `a/b`.
pub fn parent_folders(path: &str) -> Vec<&str> {
    path.match_indices('/').map(|(i, _)| &path[..i]).collect()
}

/// One HTTP exchange, all that a WebDAV folder asks of a transport: the status and the body.
#[async_trait(?Send)]
pub trait Transport {
    async fn request(&self, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>)>;
}

/// A WebDAV folder as the sync [`Remote`].
pub struct WebDav<T: Transport> {
    /// The folder's URL, ending with `/`.
    base: String,
    /// The `Authorization` header's value, if the server asks for one (e.g. `Basic …`).
    authorization: Option<String>,
    transport: T,
}

impl<T: Transport> WebDav<T> {
    pub fn new(folder_url: &str, authorization: Option<String>, transport: T) -> Self {
        WebDav { base: format!("{}/", folder_url.trim_end_matches('/')), authorization, transport }
    }

    async fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<(u16, Vec<u8>)> {
        let mut all = headers.to_vec();
        if let Some(auth) = &self.authorization {
            all.push(("Authorization", auth));
        }
        self.transport.request(method, &format!("{}{path}", self.base), &all, body).await
    }

    /// Makes folder `path` unless it is there (201 made; 405 already there).
    async fn make_folder(&self, path: &str) -> Result<()> {
        match self.call("MKCOL", path, &[], &[]).await?.0 {
            201 | 405 => Ok(()),
            status => Err(refused("MKCOL", path, status)),
        }
    }
}

fn refused(method: &str, path: &str, status: u16) -> Error {
    Error::SyncFailed(format!("{method} {path}: the server answered {status}"))
}

#[async_trait(?Send)]
impl<T: Transport> Remote for WebDav<T> {
    async fn list(&self, folder: &str) -> Result<Vec<String>> {
        let headers = [("Depth", "1"), ("Content-Type", "application/xml; charset=utf-8")];
        match self.call("PROPFIND", &format!("{folder}/"), &headers, PROPFIND_BODY.as_bytes()).await? {
            (207, body) => multistatus_names(&String::from_utf8_lossy(&body)),
            (404, _) => Ok(Vec::new()),
            (status, _) => Err(refused("PROPFIND", folder, status)),
        }
    }

    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>> {
        match self.call("GET", path, &[], &[]).await? {
            (200, body) => Ok(Some(body)),
            (404, _) => Ok(None),
            (status, _) => Err(refused("GET", path, status)),
        }
    }

    async fn create(&self, path: &str, bytes: &[u8]) -> Result<bool> {
        // The folder itself first: the user may have named one that is not there yet.
        for folder in [""].into_iter().chain(parent_folders(path)).chain(["tmp"]) {
            self.make_folder(folder).await?;
        }
        // Unique among this device's uploads (the same path is never written twice at once), and never another
        // device's: the path names the device.
        let upload = format!("tmp/{}-{}", path.replace('/', "-"), upload_suffix());
        match self.call("PUT", &upload, &[], bytes).await?.0 {
            200 | 201 | 204 => {}
            status => return Err(refused("PUT", &upload, status)),
        }
        // `Overwrite: F`: the server refuses (412) to replace a file that is there.
        let destination = format!("{}{path}", self.base);
        let headers = [("Destination", destination.as_str()), ("Overwrite", "F")];
        match self.call("MOVE", &upload, &headers, &[]).await?.0 {
            201 | 204 => Ok(true),
            412 => {
                // Left behind, it would only take room: a failure to delete it changes nothing else.
                let _ = self.call("DELETE", &upload, &[], &[]).await;
                Ok(false)
            }
            status => Err(refused("MOVE", &upload, status)),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn upload_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

#[cfg(target_arch = "wasm32")]
fn upload_suffix() -> u128 {
    // Date.now() has millisecond steps: a random fraction keeps two uploads of one millisecond apart.
    let micros = js_sys::Date::now() * 1000.0 + (js_sys::Math::random() * 1000.0).floor();
    micros as u128
}

#[cfg(not(target_arch = "wasm32"))]
pub use native::Ureq;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use async_trait::async_trait;
    use ureq::http::Request;

    use super::Transport;
    use crate::error::{Error, Result};

    /// `ureq` as the WebDAV transport. It blocks the calling thread inside the async trait, as the native LLM
    /// transport does (`llm::native`): what a test or a CLI driven by `pollster` wants.
    pub struct Ureq(ureq::Agent);

    impl Default for Ureq {
        fn default() -> Self {
            let config = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .allow_non_standard_methods(true)
                .max_redirects(0)
                .build();
            Ureq(config.into())
        }
    }

    #[async_trait(?Send)]
    impl Transport for Ureq {
        async fn request(
            &self,
            method: &str,
            url: &str,
            headers: &[(&str, &str)],
            body: &[u8],
        ) -> Result<(u16, Vec<u8>)> {
            let failed = |e: &dyn std::fmt::Display| Error::SyncFailed(format!("{method} {url}: {e}"));
            let mut request = Request::builder().method(method).uri(url);
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            let request = request.body(body.to_vec()).map_err(|e| failed(&e))?;
            let mut response = self.0.run(request).map_err(|e| failed(&e))?;
            let bytes = response.body_mut().read_to_vec().map_err(|e| failed(&e))?;
            Ok((response.status().as_u16(), bytes))
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use browser::Fetch;

#[cfg(target_arch = "wasm32")]
mod browser {
    use async_trait::async_trait;
    use js_sys::{Function, Promise, Reflect, Uint8Array};
    use wasm_bindgen::{JsCast, JsValue};
    use wasm_bindgen_futures::JsFuture;

    use super::Transport;
    use crate::error::{Error, Result};

    /// The page's (or worker's) `fetch` as the WebDAV transport. A server of another origin must allow the
    /// methods, the `Depth`, `Destination`, `Overwrite` and `Authorization` headers (CORS), or sit behind the
    /// page's own origin.
    #[derive(Debug, Clone, Default)]
    pub struct Fetch;

    #[async_trait(?Send)]
    impl Transport for Fetch {
        async fn request(
            &self,
            method: &str,
            url: &str,
            headers: &[(&str, &str)],
            body: &[u8],
        ) -> Result<(u16, Vec<u8>)> {
            let failed = |e: JsValue| {
                let why = Reflect::get(&e, &"message".into()).ok().and_then(|m| m.as_string());
                Error::SyncFailed(format!("{method} {url}: {}", why.unwrap_or_else(|| "network error".into())))
            };
            let h = web_sys::Headers::new().map_err(failed)?;
            for (name, value) in headers {
                h.append(name, value).map_err(failed)?;
            }
            let init = web_sys::RequestInit::new();
            init.set_method(method);
            init.set_headers(&h);
            if !body.is_empty() {
                init.set_body(&Uint8Array::from(body).into());
            }
            let fetch: Function = Reflect::get(&js_sys::global(), &"fetch".into())
                .map_err(failed)?
                .dyn_into()
                .map_err(|_| Error::Unsupported("no `fetch` in this context".into()))?;
            let promise: Promise = fetch
                .call2(&js_sys::global(), &JsValue::from_str(url), &init)
                .map_err(failed)?
                .dyn_into()
                .map_err(failed)?;
            let response: web_sys::Response =
                JsFuture::from(promise).await.map_err(failed)?.dyn_into().map_err(failed)?;
            let buffer = JsFuture::from(response.array_buffer().map_err(failed)?).await.map_err(failed)?;
            Ok((response.status(), Uint8Array::new(&buffer).to_vec()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multistatus_lists_the_entries_inside_the_folder() {
        // As `rclone serve webdav` 1.60 answers (trimmed), with an escaped name and an absolute URL.
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?><D:multistatus xmlns:D="DAV:">
            <D:response><D:href>/sync/d/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/></D:resourcetype>
            </D:prop></D:propstat></D:response>
            <D:response><D:href>/sync/d/1.seg</D:href></D:response>
            <D:response><D:href>/sync/d/a%20b/</D:href></D:response>
            <D:response><d:href xmlns:d="DAV:">http://host/sync/d/2.seg</d:href></D:response>
            </D:multistatus>"#;
        assert_eq!(multistatus_names(xml).ok(), Some(vec!["1.seg".into(), "a b".into(), "2.seg".into()]));
        let empty =
            r#"<D:multistatus xmlns:D="DAV:"><D:response><D:href>/sync/d/</D:href></D:response></D:multistatus>"#;
        assert_eq!(multistatus_names(empty).ok(), Some(vec![]));
        for broken in ["<D:multistatus><D:response><D:href>/d/1.seg</D:href>", "<html><body>log in</body></html>", ""] {
            assert_eq!(multistatus_names(broken).map_err(|e| e.code()), Err("SYNC_FAILED"), "{broken}");
        }
    }

    #[test]
    fn a_file_path_names_its_folders_outermost_first() {
        assert_eq!(parent_folders("d/abc/3.seg"), ["d", "d/abc"]);
        assert!(parent_folders("check").is_empty());
    }
}
