//! Files on Slack: the `files` of a message event become attachments whose
//! locator is `url_private_download`; the host downloads one with the bot
//! token, only from Slack's file host (`files_base`), never from a URL
//! elsewhere. Sending a file is Slack's three steps: ask
//! `files.getUploadURLExternal` for an upload URL, send the bytes there,
//! and share the file with `files.completeUploadExternal`.

use pincer_plugin_sdk::types::Attachment;
use serde_json::{Value, json};

/// Slack's file host, where `url_private_download` points.
pub const DEFAULT_FILES_BASE: &str = "https://files.slack.com";
/// The path every private file URL has.
const PRIVATE_PATH: &str = "/files-pri/";

/// The attachments of an event's `files` (hosted files only: external
/// ones, tombstones and files Slack hides behind `check_file_info` have
/// no bytes to fetch).
pub fn attachments(files: &[Value]) -> Vec<Attachment> {
    files
        .iter()
        .filter(|f| {
            f["mode"]
                .as_str()
                .is_none_or(|m| m == "hosted" || m == "snippet")
        })
        .filter(|f| f["file_access"].as_str() != Some("check_file_info"))
        .filter_map(|f| {
            let locator = f["url_private_download"]
                .as_str()
                .or_else(|| f["url_private"].as_str())?;
            let name = f["name"]
                .as_str()
                .or_else(|| f["title"].as_str())
                .unwrap_or("file");
            Some(Attachment {
                id: f["id"].as_str()?.to_string(),
                name: name.to_string(),
                media_type: f["mimetype"].as_str().map(str::to_string),
                size: f["size"].as_u64(),
                locator: locator.to_string(),
            })
        })
        .collect()
}

/// `locator` when it is a private file URL on `files_base` (scheme, host
/// and port equal; the path under `/files-pri/`); why not otherwise. The
/// bot token goes only there.
pub fn download_url(locator: &str, files_base: &str) -> Result<String, String> {
    let origin = |url: &str| -> Option<(String, String)> {
        let (scheme, rest) = url.split_once("://")?;
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.contains('@') || authority.is_empty() {
            return None;
        }
        Some((
            format!(
                "{}://{}",
                scheme.to_ascii_lowercase(),
                authority.to_ascii_lowercase()
            ),
            rest[end..].to_string(),
        ))
    };
    let (want, _) =
        origin(files_base).ok_or_else(|| format!("`files_base` {files_base:?} is not a URL"))?;
    let (got, path) =
        origin(locator).ok_or_else(|| format!("the file URL {locator:?} is not a URL"))?;
    if got != want {
        return Err(format!(
            "the file URL points to {got}, not Slack's file host {want}; it is not fetched"
        ));
    }
    if !path.starts_with(PRIVATE_PATH) || path.contains("/../") || path.contains('\\') {
        return Err(format!(
            "the file URL's path is not under {PRIVATE_PATH}; it is not fetched"
        ));
    }
    Ok(locator.to_string())
}

/// The form of `files.getUploadURLExternal`.
pub fn upload_url_form(name: &str, length: u64) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("filename", name)
        .append_pair("length", &length.to_string())
        .finish()
}

/// The body of `files.completeUploadExternal`: the file shared in
/// `channel` (in the thread `thread`), with `comment` as its message.
pub fn complete_body(
    file_id: &str,
    title: &str,
    channel: &str,
    thread: Option<&str>,
    comment: Option<&str>,
) -> Value {
    let mut body = json!({
        "files": [{"id": file_id, "title": title}],
        "channel_id": channel,
    });
    if let Some(thread) = thread {
        body["thread_ts"] = json!(thread);
    }
    if let Some(comment) = comment.filter(|c| !c.is_empty()) {
        body["initial_comment"] = json!(comment);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_objects_from_slacks_docs_become_attachments() {
        // The file object of Slack's docs (api.slack.com/types/file), trimmed.
        let files = vec![
            json!({
                "id": "F0S43PZDF", "name": "tedair.gif", "title": "tedair.gif",
                "mimetype": "image/gif", "filetype": "gif", "size": 137531,
                "mode": "hosted", "is_external": false,
                "url_private": "https://files.slack.com/files-pri/T0T7GJEKE-F0S43PZDF/tedair.gif",
                "url_private_download": "https://files.slack.com/files-pri/T0T7GJEKE-F0S43PZDF/download/tedair.gif"
            }),
            json!({"id": "F1", "name": "x", "mode": "external", "url_private": "https://drive.example/x"}),
            json!({"id": "F2", "mode": "tombstone"}),
            json!({"id": "F3", "file_access": "check_file_info"}),
        ];
        let got = attachments(&files);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, "F0S43PZDF");
        assert_eq!(got[0].size, Some(137531));
        assert_eq!(got[0].media_type.as_deref(), Some("image/gif"));
        assert!(got[0].locator.ends_with("/download/tedair.gif"));
    }

    #[test]
    fn only_private_urls_on_slacks_file_host_are_fetched() {
        let base = DEFAULT_FILES_BASE;
        let good = "https://files.slack.com/files-pri/T1-F1/download/a.txt";
        assert_eq!(download_url(good, base).unwrap(), good);
        for bad in [
            "https://evil.example/files-pri/T1-F1/a.txt",
            "https://files.slack.com.evil.example/files-pri/x",
            "https://files.slack.com@evil.example/files-pri/x",
            "http://files.slack.com/files-pri/x",
            "https://files.slack.com:8443/files-pri/x",
            "https://files.slack.com/api/x",
            "https://files.slack.com/files-pri/../api/x",
            "file:///etc/passwd",
            "not a url",
        ] {
            assert!(download_url(bad, base).is_err(), "{bad}");
        }
        let fake = "http://127.0.0.1:4000";
        assert!(download_url("http://127.0.0.1:4000/files-pri/T-F/download/a", fake).is_ok());
        assert!(download_url("http://127.0.0.1:4001/files-pri/T-F/download/a", fake).is_err());
    }

    #[test]
    fn the_share_names_the_channel_thread_and_comment() {
        let body = complete_body("F1", "a.csv", "C1", Some("1.2"), Some("here"));
        assert_eq!(body["files"][0]["id"], "F1");
        assert_eq!(body["channel_id"], "C1");
        assert_eq!(body["thread_ts"], "1.2");
        assert_eq!(body["initial_comment"], "here");
        let bare = complete_body("F1", "a.csv", "D1", None, Some(""));
        assert!(bare.get("thread_ts").is_none() && bare.get("initial_comment").is_none());
        assert_eq!(upload_url_form("a b.csv", 12), "filename=a+b.csv&length=12");
    }
}
