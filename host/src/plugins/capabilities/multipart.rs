//! `multipart/form-data` (RFC 7578) for `upload.send`: the plugin's text
//! fields, then the file, which the host holds.

use crate::plugins::state::UploadFile;

/// The content type (with its boundary) and the body.
pub fn encode(
    fields: &[(String, String)],
    file_field: &str,
    file: &UploadFile,
) -> (String, Vec<u8>) {
    let boundary = format!("pincer-{}", uuid::Uuid::new_v4().simple());
    let mut body = Vec::with_capacity(file.bytes.len() + 256 * (fields.len() + 1));
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"\r\n\r\n",
                escaped(name)
            )
            .as_bytes(),
        );
        body.extend_from_slice(value.as_bytes());
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{}\"; filename=\"{}\"\r\nContent-Type: {}\r\n\r\n",
            escaped(file_field),
            escaped(&file.name),
            escaped(&file.media_type)
        )
        .as_bytes(),
    );
    body.extend_from_slice(&file.bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// A name or value inside a quoted header parameter, as the WHATWG form
/// encoding writes it: `"` as `%22`, line breaks as `%0D`/`%0A`.
fn escaped(text: &str) -> String {
    text.replace('"', "%22")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_then_the_file_with_its_name_and_type() {
        let file = UploadFile {
            name: "report.csv".into(),
            media_type: "text/csv".into(),
            bytes: b"a,b\n1,2\n".to_vec(),
        };
        let (content_type, body) = encode(
            &[
                ("file_type".into(), "stream".into()),
                ("x\"\r\ny".into(), "v".into()),
            ],
            "file",
            &file,
        );
        let boundary = content_type
            .strip_prefix("multipart/form-data; boundary=")
            .expect("boundary");
        let text = String::from_utf8(body).expect("utf-8");
        assert_eq!(
            text,
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file_type\"\r\n\r\nstream\r\n\
                 --{boundary}\r\nContent-Disposition: form-data; name=\"x%22%0D%0Ay\"\r\n\r\nv\r\n\
                 --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"report.csv\"\r\nContent-Type: text/csv\r\n\r\na,b\n1,2\n\r\n\
                 --{boundary}--\r\n"
            )
        );
    }
}
