//! A WebDAV folder (RFC 4918) as the sync [`Remote`](crate::sync::Remote): `PROPFIND` (depth 1) lists a folder,
//! `GET` reads a file, and a write is `MKCOL` of its folders, `PUT` under `tmp/`, then `MOVE` into place, so that
//! a reader never sees half a segment. The multistatus parsing is shared; the transport here is native (`ureq`,
//! for tests and tools); the browser's goes over `fetch`.

use percent_encoding::percent_decode_str;
use quick_xml::events::Event;
use quick_xml::Reader;

use crate::error::{Error, Result};

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

#[cfg(not(target_arch = "wasm32"))]
pub use native::NativeWebDav;

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use async_trait::async_trait;
    use ureq::http::{Request, Response};
    use ureq::Body;

    use super::{multistatus_names, parent_folders, PROPFIND_BODY};
    use crate::error::{Error, Result};
    use crate::sync::Remote;

    /// A WebDAV folder over `ureq`. It blocks the calling thread inside the async trait, as the native LLM
    /// transport does (`llm::native`): what a test or a CLI driven by `pollster` wants.
    pub struct NativeWebDav {
        /// The folder's URL, ending with `/`.
        base: String,
        /// The `Authorization` header's value, if the server asks for one (e.g. `Basic …`).
        authorization: Option<String>,
        agent: ureq::Agent,
    }

    impl NativeWebDav {
        pub fn new(folder_url: &str, authorization: Option<String>) -> Self {
            let base = format!("{}/", folder_url.trim_end_matches('/'));
            let agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .allow_non_standard_methods(true)
                .max_redirects(0)
                .build()
                .into();
            NativeWebDav { base, authorization, agent }
        }

        fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Result<Response<Body>> {
            let mut request = Request::builder().method(method).uri(format!("{}{path}", self.base));
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            if let Some(auth) = &self.authorization {
                request = request.header("Authorization", auth);
            }
            let request = request.body(body.to_vec()).map_err(|e| failed(method, path, &e))?;
            self.agent.run(request).map_err(|e| failed(method, path, &e))
        }

        /// Makes folder `path` unless it is there (201 made; 405 already there).
        fn make_folder(&self, path: &str) -> Result<()> {
            match self.call("MKCOL", path, &[], &[])?.status().as_u16() {
                201 | 405 => Ok(()),
                status => Err(refused("MKCOL", path, status)),
            }
        }
    }

    fn failed(method: &str, path: &str, e: &dyn std::fmt::Display) -> Error {
        Error::SyncFailed(format!("{method} {path}: {e}"))
    }

    fn refused(method: &str, path: &str, status: u16) -> Error {
        Error::SyncFailed(format!("{method} {path}: the server answered {status}"))
    }

    #[async_trait(?Send)]
    impl Remote for NativeWebDav {
        async fn list(&self, folder: &str) -> Result<Vec<String>> {
            let headers = [("Depth", "1"), ("Content-Type", "application/xml; charset=utf-8")];
            let mut response = self.call("PROPFIND", &format!("{folder}/"), &headers, PROPFIND_BODY.as_bytes())?;
            match response.status().as_u16() {
                207 => {
                    let xml = response.body_mut().read_to_string().map_err(|e| failed("PROPFIND", folder, &e))?;
                    multistatus_names(&xml)
                }
                404 => Ok(Vec::new()),
                status => Err(refused("PROPFIND", folder, status)),
            }
        }

        async fn get(&self, path: &str) -> Result<Option<Vec<u8>>> {
            let mut response = self.call("GET", path, &[], &[])?;
            match response.status().as_u16() {
                200 => Ok(Some(response.body_mut().read_to_vec().map_err(|e| failed("GET", path, &e))?)),
                404 => Ok(None),
                status => Err(refused("GET", path, status)),
            }
        }

        async fn put(&self, path: &str, bytes: &[u8]) -> Result<()> {
            // The folder itself first: the user may have named one that is not there yet.
            for folder in [""].into_iter().chain(parent_folders(path)).chain(["tmp"]) {
                self.make_folder(folder)?;
            }
            // Unique among this device's uploads: the same path is never written twice at once.
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            let upload = format!("tmp/{}-{nanos}", path.replace('/', "-"));
            match self.call("PUT", &upload, &[], bytes)?.status().as_u16() {
                200 | 201 | 204 => {}
                status => return Err(refused("PUT", &upload, status)),
            }
            let destination = format!("{}{path}", self.base);
            let headers = [("Destination", destination.as_str()), ("Overwrite", "T")];
            match self.call("MOVE", &upload, &headers, &[])?.status().as_u16() {
                201 | 204 => Ok(()),
                status => Err(refused("MOVE", &upload, status)),
            }
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
