//! Files on Feishu: a `file` or `image` message carries a key; the host
//! downloads its bytes with the tenant token from the message-resource API
//! (https://open.feishu.cn/document/server-docs/im-v1/message/get-2).
//! Sending uploads the bytes (`im/v1/images` for images up to 10 MB,
//! `im/v1/files` otherwise) and sends an `image` or `file` message with
//! the key (https://open.feishu.cn/document/server-docs/im-v1/image/create,
//! .../file/create).

use pincer_plugin_sdk::types::Attachment;
use serde_json::Value;

/// Feishu's limit for files (`im/v1/files`).
pub const MAX_FILE_BYTES: u64 = 30 << 20;
/// Feishu's limit for images (`im/v1/images`); larger ones go as files.
pub const MAX_IMAGE_BYTES: u64 = 10 << 20;

/// The attachment of a `file` or `image` message's content; its locator is
/// `file:<key>` or `image:<key>` (the resource type and key).
pub fn attachment(message_type: &str, content: &str) -> Option<Attachment> {
    let content: Value = serde_json::from_str(content).ok()?;
    let (key, name, kind) = match message_type {
        "file" => (
            content["file_key"].as_str()?,
            content["file_name"].as_str().unwrap_or("file"),
            "file",
        ),
        "image" => (content["image_key"].as_str()?, "image", "image"),
        _ => return None,
    };
    if !valid_key(key) {
        return None;
    }
    Some(Attachment {
        id: key.to_string(),
        name: name.to_string(),
        media_type: None,
        size: None,
        locator: format!("{kind}:{key}"),
    })
}

/// The message-resource path of `locator` in message `message_id`.
pub fn resource_path(message_id: &str, locator: &str) -> Result<String, String> {
    let (kind, key) = locator
        .split_once(':')
        .filter(|(kind, _)| matches!(*kind, "file" | "image"))
        .ok_or_else(|| format!("{locator:?} is not a Feishu resource"))?;
    if !message_id.starts_with("om_") || !valid_key(message_id) || !valid_key(key) {
        return Err(format!("{message_id:?} / {key:?} are not Feishu ids"));
    }
    Ok(format!(
        "/open-apis/im/v1/messages/{message_id}/resources/{key}?type={kind}"
    ))
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 200
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// How a file goes up: as an image (upload path, form fields, file part)
/// or as a file of Feishu's `file_type`.
pub struct Upload {
    pub path: &'static str,
    pub fields: Vec<(String, String)>,
    pub file_field: &'static str,
    /// The message type that carries the key, and the key's field.
    pub msg_type: &'static str,
    pub key_field: &'static str,
}

pub fn upload(name: &str, media_type: &str, size: u64) -> Upload {
    let image = matches!(
        media_type,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) && size <= MAX_IMAGE_BYTES;
    if image {
        return Upload {
            path: "/open-apis/im/v1/images",
            fields: vec![("image_type".into(), "message".into())],
            file_field: "image",
            msg_type: "image",
            key_field: "image_key",
        };
    }
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    let file_type = match ext.as_deref() {
        Some("pdf") => "pdf",
        Some("doc" | "docx") => "doc",
        Some("xls" | "xlsx") => "xls",
        Some("ppt" | "pptx") => "ppt",
        Some("mp4") => "mp4",
        Some("opus") => "opus",
        _ => "stream",
    };
    Upload {
        path: "/open-apis/im/v1/files",
        fields: vec![
            ("file_type".into(), file_type.into()),
            ("file_name".into(), name.into()),
        ],
        file_field: "file",
        msg_type: "file",
        key_field: "file_key",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_image_messages_become_attachments() {
        // Content shapes from Feishu's message-content docs.
        let file = attachment(
            "file",
            r#"{"file_key":"file_v2_0dcdc7c9-fab3-4b4a-a4b9-6d3d9d6e2a7g","file_name":"app.log"}"#,
        )
        .unwrap();
        assert_eq!(file.name, "app.log");
        assert_eq!(
            file.locator,
            "file:file_v2_0dcdc7c9-fab3-4b4a-a4b9-6d3d9d6e2a7g"
        );
        let image = attachment(
            "image",
            r#"{"image_key":"img_7ea74629-9191-4176-998c-2e603c9c5e8g"}"#,
        )
        .unwrap();
        assert!(image.locator.starts_with("image:img_"));
        assert!(attachment("file", r#"{"file_key":"../x"}"#).is_none());
        assert!(attachment("text", r#"{"text":"hi"}"#).is_none());
    }

    #[test]
    fn resources_are_fetched_only_by_their_message_and_key() {
        assert_eq!(
            resource_path("om_1", "file:file_v3_abc").unwrap(),
            "/open-apis/im/v1/messages/om_1/resources/file_v3_abc?type=file"
        );
        for (id, locator) in [
            ("om_1", "http://evil.example/x"),
            ("om_1", "file:a/b"),
            ("om_1", "video:x"),
            ("x/../om_1", "file:k"),
            ("om_1?x=", "file:k"),
        ] {
            assert!(resource_path(id, locator).is_err(), "{id} {locator}");
        }
    }

    #[test]
    fn images_go_up_as_images_and_the_rest_as_typed_files() {
        let u = upload("chart.png", "image/png", 1000);
        assert_eq!(
            (u.path, u.msg_type, u.file_field),
            ("/open-apis/im/v1/images", "image", "image")
        );
        let u = upload("big.png", "image/png", MAX_IMAGE_BYTES + 1);
        assert_eq!(u.msg_type, "file");
        let u = upload("report.csv", "text/csv", 10);
        assert_eq!(u.fields[0], ("file_type".into(), "stream".into()));
        assert_eq!(upload("a.PDF", "application/pdf", 1).fields[0].1, "pdf");
    }
}
