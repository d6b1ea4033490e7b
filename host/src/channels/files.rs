//! Files people send with their messages: the host downloads each one
//! itself (the channel plugin only says which request fetches it; the
//! bytes go from the platform straight to the file), refuses what is too
//! large or of a kind not allowed (told by the first bytes, never by the
//! name), and writes it beneath the workspace folder through directory
//! handles at `inbox/<message>/<name>`, owned by the container's user.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;

use super::ChannelHost;
use crate::config::{ChannelFiles, FileType};
use crate::containers::beneath;
use crate::plugins::{OpenFileError, api};

/// How many first bytes decide a file's kind.
pub const SNIFF_BYTES: usize = 8192;
/// The folder, beneath the workspace, that inbound files go to.
pub const INBOX: &str = "inbox";
/// The longest file name kept (bytes).
pub const MAX_NAME_BYTES: usize = 100;
/// The longest one download may take (a server trickling bytes holds no
/// turn longer).
pub const DOWNLOAD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// Where one workspace's inbox is on the host.
#[derive(Debug, Clone)]
pub struct InboxDir {
    /// The host folder mounted at `/workspace`.
    pub workspace_dir: PathBuf,
    /// The container's user, who owns what is written there.
    pub owner: Option<(u32, u32)>,
}

/// What became of one file of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    Saved(Saved),
    Refused {
        /// The name the sender gave.
        name: String,
        why: String,
    },
}

/// A file written to the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    /// Its path as the agent sees it: `/workspace/inbox/<message>/<name>`.
    pub path: String,
    /// Its path relative to the workspace folder.
    pub relative: String,
    pub size: u64,
    pub media_type: String,
    pub kind: FileType,
}

/// What a file's first bytes say it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sniffed {
    pub media_type: String,
    pub kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Of(FileType),
    /// A program for some machine: never taken.
    Executable(&'static str),
    /// Binary data of no kind pincer knows.
    Unknown,
}

/// The kind of a file from its first bytes (`head`, at most
/// [`SNIFF_BYTES`]; `cut` when the file goes on past them). `claimed` is
/// the media type the platform reported, kept for text when it is a text
/// type.
pub fn sniff(head: &[u8], cut: bool, claimed: Option<&str>) -> Sniffed {
    let of = |media: &str, kind: FileType| Sniffed {
        media_type: media.to_string(),
        kind: Kind::Of(kind),
    };
    let executable = |what: &'static str| Sniffed {
        media_type: "application/octet-stream".into(),
        kind: Kind::Executable(what),
    };
    match head {
        [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, ..] => of("image/png", FileType::Image),
        [0xff, 0xd8, 0xff, ..] => of("image/jpeg", FileType::Image),
        [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => of("image/gif", FileType::Image),
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => of("image/webp", FileType::Image),
        [b'%', b'P', b'D', b'F', b'-', ..] => of("application/pdf", FileType::Pdf),
        [b'P', b'K', 3, 4, ..] => zip_kind(head),
        [0x1f, 0x8b, ..] => of("application/gzip", FileType::Archive),
        [0x7f, b'E', b'L', b'F', ..] => executable("an ELF executable"),
        [b'M', b'Z', ..] => executable("a Windows executable"),
        [0xfe, 0xed, 0xfa, 0xce | 0xcf, ..]
        | [0xce | 0xcf, 0xfa, 0xed, 0xfe, ..]
        | [0xca, 0xfe, 0xba, 0xbe, ..] => executable("a Mach-O executable"),
        _ if is_text(head, cut) => {
            let claimed = claimed
                .map(|c| {
                    c.split(';')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_ascii_lowercase()
                })
                .filter(|c| {
                    c.starts_with("text/")
                        && c != "text/html"
                        && c.bytes().all(|b| b.is_ascii_graphic())
                        || [
                            "application/json",
                            "application/xml",
                            "application/x-yaml",
                            "application/csv",
                        ]
                        .contains(&c.as_str())
                });
            Sniffed {
                media_type: claimed.unwrap_or_else(|| "text/plain".into()),
                kind: Kind::Of(FileType::Text),
            }
        }
        _ => Sniffed {
            media_type: "application/octet-stream".into(),
            kind: Kind::Unknown,
        },
    }
}

/// UTF-8 without NUL bytes (a multi-byte character cut at the end of a
/// `cut` head is fine).
fn is_text(head: &[u8], cut: bool) -> bool {
    if head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => cut && e.error_len().is_none(),
    }
}

/// A zip container: an Office Open XML or OpenDocument file when its
/// first entries say so, else an archive.
fn zip_kind(head: &[u8]) -> Sniffed {
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    let office = |media: &str| Sniffed {
        media_type: media.to_string(),
        kind: Kind::Of(FileType::Office),
    };
    // An OpenDocument file's first entry is `mimetype`, stored, holding it.
    if head.get(30..38) == Some(b"mimetype") {
        let rest = &head[38..];
        let next_entry = rest
            .windows(4)
            .position(|w| w == b"PK\x03\x04")
            .unwrap_or(rest.len());
        let rest = &rest[..next_entry];
        let end = rest
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || b"./-+".contains(b)))
            .unwrap_or(rest.len());
        if let Ok(media) = std::str::from_utf8(&rest[..end])
            && media.starts_with("application/vnd.oasis.opendocument.")
        {
            return office(media);
        }
    }
    if has(b"[Content_Types].xml") || has(b"_rels/.rels") {
        let media = if has(b"word/") {
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
        } else if has(b"xl/") {
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
        } else if has(b"ppt/") {
            "application/vnd.openxmlformats-officedocument.presentationml.presentation"
        } else {
            "application/vnd.openxmlformats-officedocument"
        };
        return office(media);
    }
    Sniffed {
        media_type: "application/zip".into(),
        kind: Kind::Of(FileType::Archive),
    }
}

/// `given` reduced to a basename of `[A-Za-z0-9._-]`, at most
/// [`MAX_NAME_BYTES`], not starting with a dot; every other character
/// becomes `_` (runs of them one). `file` (with the extension, if one
/// survives) when nothing else is left.
pub fn safe_name(given: &str) -> String {
    let base = given.rsplit(['/', '\\']).next().unwrap_or("");
    let mut out = String::with_capacity(base.len());
    for c in base.chars() {
        let c = if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
            c
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    // A leading dot starts no extension (`.bashrc` is a name).
    let (stem, ext) = match out.rfind('.') {
        Some(dot) if dot > 0 && out.len() - dot <= 16 => out.split_at(dot),
        _ => (out.as_str(), ""),
    };
    let ext = ext.trim_end_matches(['.', '_']);
    let ext = if ext.len() > 1 { ext } else { "" };
    let stem = stem.trim_matches(['.', '_']);
    let stem = if stem.is_empty() { "file" } else { stem };
    let room = MAX_NAME_BYTES - ext.len();
    // ASCII only from here: any byte is a character boundary.
    format!("{}{ext}", &stem[..stem.len().min(room)])
}

/// The `n`th name tried for `name` (1: `name` itself, then `stem-2.ext`).
fn numbered(name: &str, n: u32) -> String {
    if n <= 1 {
        return name.to_string();
    }
    let (stem, ext) = match name.rfind('.') {
        Some(dot) if dot > 0 => name.split_at(dot),
        _ => (name, ""),
    };
    let suffix = format!("-{n}");
    let room = MAX_NAME_BYTES.saturating_sub(ext.len() + suffix.len());
    format!("{}{suffix}{ext}", &stem[..stem.len().min(room)])
}

/// `1.5 MiB`, `200 MiB`, `12 KiB`, `812 bytes` (in 1024s, as
/// `max_bytes` is written).
pub fn size_text(bytes: u64) -> String {
    let one = |value: f64, unit: &str| {
        let text = format!("{value:.1}");
        format!("{} {unit}", text.strip_suffix(".0").unwrap_or(&text))
    };
    if bytes >= 1 << 20 {
        one(bytes as f64 / f64::from(1u32 << 20), "MiB")
    } else if bytes >= 1 << 10 {
        one(bytes as f64 / 1024.0, "KiB")
    } else {
        format!("{bytes} bytes")
    }
}

impl ChannelHost {
    /// Downloads the `files` of message `message_id` of `channel` into
    /// `inbox` as `rules` allow, one after the other; what became of each,
    /// in order. Nothing refused is left on disk.
    pub async fn take_files(
        &self,
        channel: &str,
        message_id: &str,
        files: &[super::StoredFile],
        inbox: &InboxDir,
        rules: &ChannelFiles,
    ) -> Vec<Taken> {
        let mut taken = Vec::with_capacity(files.len());
        for file in files {
            let file = api::Attachment::from(file);
            let outcome = tokio::time::timeout(
                DOWNLOAD_DEADLINE,
                self.take_one(channel, message_id, &file, inbox, rules),
            )
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "its download took longer than {} minutes and was given up",
                    DOWNLOAD_DEADLINE.as_secs() / 60
                ))
            });
            taken.push(match outcome {
                Ok(saved) => Taken::Saved(saved),
                Err(why) => {
                    tracing::info!(%channel, message = %message_id, file = %file.name, "file not taken: {why}");
                    Taken::Refused {
                        name: file.name.clone(),
                        why,
                    }
                }
            });
        }
        taken
    }

    async fn take_one(
        &self,
        channel: &str,
        message_id: &str,
        file: &api::Attachment,
        inbox: &InboxDir,
        rules: &ChannelFiles,
    ) -> Result<Saved, String> {
        let max = rules.max_bytes.0;
        let too_large = |size: u64| {
            format!(
                "it is {}, above this channel's limit of {}",
                size_text(size),
                size_text(max)
            )
        };
        if rules.types.is_empty() {
            return Err("this channel takes no files (channels.NAME.files.types is empty)".into());
        }
        if let Some(size) = file.size.filter(|s| *s > max) {
            return Err(too_large(size));
        }
        let loaded = self
            .get(channel)
            .ok_or_else(|| format!("channel `{channel}` is not loaded"))?;
        let mut body = match self
            .plugins
            .channel_open_file(&loaded.plugin, message_id, file)
            .await
        {
            Ok(Ok(body)) => body,
            Ok(Err(OpenFileError::Channel(e))) => {
                return Err(format!(
                    "the channel could not fetch it: {}",
                    channel_error(&e)
                ));
            }
            Ok(Err(OpenFileError::Http(e))) => return Err(format!("downloading it failed: {e}")),
            Err(e) => return Err(format!("the channel failed: {e}")),
        };
        if !(200..300).contains(&body.status) {
            return Err(format!(
                "the platform answered HTTP {} to its download",
                body.status
            ));
        }
        if let Some(length) = body.length.filter(|l| *l > max) {
            return Err(too_large(length));
        }
        let served_html = body
            .header("content-type")
            .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/html"));
        let claimed_html = file
            .media_type
            .as_deref()
            .is_some_and(|t| t.contains("html"));
        if served_html && !claimed_html {
            return Err(
                "the platform answered with a web page instead of the file (a sign-in page: does the app have the scope to read files?)"
                    .into(),
            );
        }
        let mut head: Vec<u8> = Vec::with_capacity(SNIFF_BYTES);
        let mut pending: Vec<bytes::Bytes> = Vec::new();
        let mut ended = false;
        while head.len() < SNIFF_BYTES {
            match body
                .chunk()
                .await
                .map_err(|e| format!("downloading it failed: {e}"))?
            {
                Some(chunk) => {
                    let want = (SNIFF_BYTES - head.len()).min(chunk.len());
                    head.extend_from_slice(&chunk[..want]);
                    pending.push(chunk);
                }
                None => {
                    ended = true;
                    break;
                }
            }
        }
        let received: u64 = pending.iter().map(|c| c.len() as u64).sum();
        let sniffed = sniff(
            &head,
            !ended || received > head.len() as u64,
            file.media_type.as_deref(),
        );
        let kind = match sniffed.kind {
            Kind::Of(kind) if rules.types.contains(&kind) => kind,
            Kind::Of(kind) => {
                return Err(format!(
                    "its content is {} ({}), a kind this channel does not take (it takes {})",
                    kind.name(),
                    sniffed.media_type,
                    kinds(&rules.types)
                ));
            }
            Kind::Executable(what) => {
                return Err(format!(
                    "its content is {what}; pincer never takes programs"
                ));
            }
            Kind::Unknown => {
                return Err(format!(
                    "its content is binary data of no kind this channel takes (it takes {})",
                    kinds(&rules.types)
                ));
            }
        };
        if received > max {
            return Err(too_large(received));
        }
        let folder = safe_name(message_id);
        let wanted = safe_name(&file.name);
        let (dir, name, std_file) = {
            let inbox = inbox.clone();
            let folder = folder.clone();
            tokio::task::spawn_blocking(move || create_in_inbox(&inbox, &folder, &wanted))
                .await
                .map_err(|e| format!("writing it failed: {e}"))??
        };
        let display = Path::new(INBOX).join(&folder).join(&name);
        let mut out = tokio::fs::File::from_std(std_file);
        let written = async {
            let mut total = 0u64;
            for chunk in pending {
                total += chunk.len() as u64;
                out.write_all(&chunk).await?;
            }
            if !ended {
                while let Some(chunk) = body
                    .chunk()
                    .await
                    .map_err(|e| std::io::Error::other(format!("downloading it failed: {e}")))?
                {
                    total += chunk.len() as u64;
                    if total > max {
                        return Err(std::io::Error::other(too_large(total)));
                    }
                    out.write_all(&chunk).await?;
                }
            }
            out.flush().await?;
            Ok::<u64, std::io::Error>(total)
        }
        .await;
        match written {
            Ok(size) => Ok(Saved {
                path: format!(
                    "{}/{}",
                    pincer_runner_protocol::mounts::WORKSPACE_DIR,
                    display.display()
                ),
                relative: display.display().to_string(),
                size,
                media_type: sniffed.media_type,
                kind,
            }),
            Err(e) => {
                drop(out);
                let _ = beneath::remove_beneath(dir.as_fd(), &name);
                Err(e.to_string())
            }
        }
    }
}

/// Opens (making them when missing) `inbox/<folder>/` beneath the
/// workspace folder and creates a new file there named `wanted`, or
/// `wanted` numbered when that is taken.
fn create_in_inbox(
    inbox: &InboxDir,
    folder: &str,
    wanted: &str,
) -> Result<(std::os::fd::OwnedFd, String, std::fs::File), String> {
    let fail = |e: beneath::BeneathError| format!("writing it into the workspace failed: {e}");
    let workspace = beneath::open_dir(&inbox.workspace_dir).map_err(fail)?;
    let top = beneath::subdir_beneath(
        workspace.as_fd(),
        INBOX,
        0o755,
        inbox.owner,
        Path::new(INBOX),
    )
    .map_err(fail)?;
    let display = Path::new(INBOX).join(folder);
    let dir =
        beneath::subdir_beneath(top.as_fd(), folder, 0o755, inbox.owner, &display).map_err(fail)?;
    for n in 1..=1000 {
        let name = numbered(wanted, n);
        if let Some(file) =
            beneath::create_beneath(dir.as_fd(), &name, inbox.owner, &display.join(&name))
                .map_err(fail)?
        {
            return Ok((dir, name, file));
        }
    }
    Err(format!(
        "writing it into the workspace failed: {} and 999 numbered names beside it are taken",
        display.join(wanted).display()
    ))
}

fn kinds(types: &[FileType]) -> String {
    types
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}

fn channel_error(e: &api::ChannelError) -> String {
    use api::ChannelError as E;
    match e {
        E::RetryLater(r) => format!("rate limited ({})", r.reason),
        E::Upstream(m)
        | E::Rejected(m)
        | E::Unauthorized(m)
        | E::BadRequest(m)
        | E::Unsupported(m) => m.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_safe_basenames() {
        for (given, want) in [
            ("report.csv", "report.csv"),
            ("../../etc/passwd", "passwd"),
            ("C:\\Users\\x\\app log.txt", "app_log.txt"),
            (".bashrc", "bashrc"),
            ("...", "file"),
            ("", "file"),
            ("日志.txt", "file.txt"),
            ("a\u{0}b\nc.md", "a_b_c.md"),
            ("$(rm -rf ~).sh", "rm_-rf.sh"),
        ] {
            assert_eq!(safe_name(given), want, "{given:?}");
        }
        let long = format!("{}.log", "x".repeat(300));
        let safe = safe_name(&long);
        assert_eq!(safe.len(), MAX_NAME_BYTES);
        assert!(safe.ends_with(".log"), "{safe}");
        assert_eq!(numbered("a.txt", 2), "a-2.txt");
        assert_eq!(numbered(&safe, 12).len(), MAX_NAME_BYTES);
        assert!(numbered(&safe, 12).ends_with("-12.log"));
    }

    #[test]
    fn kinds_are_told_by_content_not_by_name() {
        let kind = |head: &[u8]| sniff(head, false, None).kind;
        assert_eq!(kind(b"\x89PNG\r\n\x1a\n...."), Kind::Of(FileType::Image));
        assert_eq!(kind(b"\xff\xd8\xff\xe0"), Kind::Of(FileType::Image));
        assert_eq!(kind(b"GIF89a.."), Kind::Of(FileType::Image));
        assert_eq!(kind(b"RIFF\x10\0\0\0WEBPVP8 "), Kind::Of(FileType::Image));
        assert_eq!(kind(b"%PDF-1.7\n"), Kind::Of(FileType::Pdf));
        assert_eq!(kind(b"\x1f\x8b\x08\0"), Kind::Of(FileType::Archive));
        assert_eq!(
            kind(b"\x7fELF\x02\x01\x01"),
            Kind::Executable("an ELF executable")
        );
        assert_eq!(kind(b"MZ\x90\0"), Kind::Executable("a Windows executable"));
        assert_eq!(
            kind(b"\xcf\xfa\xed\xfe"),
            Kind::Executable("a Mach-O executable")
        );
        assert_eq!(
            kind(b"2026-12-05 ERROR disk full\n"),
            Kind::Of(FileType::Text)
        );
        assert_eq!(kind("日志\n".as_bytes()), Kind::Of(FileType::Text));
        assert_eq!(kind(b"abc\0def"), Kind::Unknown);
        assert_eq!(kind(b"\xc3\x28 invalid utf-8"), Kind::Unknown);
        // A head cut inside a multi-byte character is still text.
        let cut = &"ab日".as_bytes()[..3];
        assert_eq!(sniff(cut, true, None).kind, Kind::Of(FileType::Text));
        assert_eq!(sniff(cut, false, None).kind, Kind::Unknown);
        // The platform's text type is kept; a claim of another kind is not.
        assert_eq!(
            sniff(b"a,b\n1,2\n", false, Some("text/csv")).media_type,
            "text/csv"
        );
        assert_eq!(
            sniff(b"a,b\n", false, Some("image/png")).media_type,
            "text/plain"
        );
        assert_eq!(
            sniff(b"\x7fELF", false, Some("text/plain")).kind,
            Kind::Executable("an ELF executable")
        );
    }

    fn zip_with_first_entry(name: &[u8], data: &[u8]) -> Vec<u8> {
        let mut z = b"PK\x03\x04".to_vec();
        z.extend_from_slice(&[0; 22]);
        z.extend_from_slice(&(name.len() as u16).to_le_bytes());
        z.extend_from_slice(&0u16.to_le_bytes());
        z.extend_from_slice(name);
        z.extend_from_slice(data);
        z
    }

    #[test]
    fn zips_are_office_files_only_when_their_entries_say_so() {
        let docx = zip_with_first_entry(b"[Content_Types].xml", b"<Types/>word/document.xml");
        let s = sniff(&docx, true, None);
        assert_eq!(s.kind, Kind::Of(FileType::Office));
        assert!(s.media_type.ends_with("wordprocessingml.document"));
        let odt = zip_with_first_entry(
            b"mimetype",
            b"application/vnd.oasis.opendocument.textPK\x03\x04",
        );
        let s = sniff(&odt, true, None);
        assert_eq!(s.media_type, "application/vnd.oasis.opendocument.text");
        let plain = zip_with_first_entry(b"src/main.rs", b"fn main() {}");
        assert_eq!(sniff(&plain, true, None).kind, Kind::Of(FileType::Archive));
    }

    #[test]
    fn files_land_beneath_the_inbox_numbered_and_never_through_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let inbox = InboxDir {
            workspace_dir: tmp.path().to_path_buf(),
            owner: None,
        };
        let (_, first, _) = create_in_inbox(&inbox, "1700.0001", "a.txt").unwrap();
        let (_, second, _) = create_in_inbox(&inbox, "1700.0001", "a.txt").unwrap();
        assert_eq!((first.as_str(), second.as_str()), ("a.txt", "a-2.txt"));
        assert!(tmp.path().join("inbox/1700.0001/a-2.txt").is_file());
        // A container that replaced its inbox folder with a symlink to a
        // host folder gets nothing written there.
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("inbox/m2")).unwrap();
        let err = create_in_inbox(&inbox, "m2", "x.txt").unwrap_err();
        assert!(err.contains("symlink"), "{err}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // A symlink planted at the file's name is skipped, not followed.
        std::os::unix::fs::symlink(
            outside.path().join("planted"),
            tmp.path().join("inbox/1700.0001/b.txt"),
        )
        .unwrap();
        let (_, name, _) = create_in_inbox(&inbox, "1700.0001", "b.txt").unwrap();
        assert_eq!(name, "b-2.txt");
        assert!(!outside.path().join("planted").exists());
    }

    #[test]
    fn sizes_read_as_platforms_show_them() {
        assert_eq!(size_text(2 << 20), "2 MiB");
        assert_eq!(size_text(200 << 20), "200 MiB");
        assert_eq!(size_text(25 << 20), "25 MiB");
        assert_eq!(size_text(1536), "1.5 KiB");
        assert_eq!(size_text(812), "812 bytes");
    }
}
