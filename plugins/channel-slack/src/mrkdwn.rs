//! CommonMark (what agents write) to Slack's `mrkdwn`.
//!
//! Slack's format is not Markdown: bold is `*b*`, italics `_i_`, strikes
//! `~s~`, links `<url|label>`, and there are no headings, tables or nested
//! quotes. Every `&`, `<` and `>` in text must be sent as `&amp;`, `&lt;` and
//! `&gt;`, or Slack reads them as its own markup (`<!channel>` pings a whole
//! channel). The links this module emits are the only raw `<…>` in its output.

use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};

/// Converts a CommonMark document to Slack mrkdwn.
pub fn to_mrkdwn(markdown: &str) -> String {
    let mut writer = Writer::default();
    let options = Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(markdown, options) {
        writer.event(event);
    }
    writer.finish()
}

/// Escapes text for Slack: `&`, `<` and `>` become entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// A URL made safe inside `<url|label>`: the characters that would end or
/// split the link syntax are percent-encoded, and `&` is written `&amp;` as
/// in all of a message's text (Slack's own events show links that way).
fn link_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for c in url.trim().chars() {
        match c {
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '|' => out.push_str("%7C"),
            ' ' => out.push_str("%20"),
            '&' => out.push_str("&amp;"),
            c if c.is_control() => {}
            _ => out.push(c),
        }
    }
    out
}

const ZERO_WIDTH_SPACE: char = '\u{200B}';

/// Whether a formatting marker next to `c` needs a zero-width space to be
/// seen by Slack: letters, digits and non-ASCII punctuation (`：`, `，`) do.
fn needs_boundary(c: char) -> bool {
    !c.is_whitespace() && !c.is_ascii_punctuation() && c != ZERO_WIDTH_SPACE
}

/// What separates the next block from what came before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Gap {
    Line,
    Blank,
}

#[derive(Debug)]
struct List {
    /// `None` for bullets; the next number for ordered lists.
    next: Option<u64>,
}

/// A link or image whose label is being collected.
#[derive(Debug)]
struct PendingLink {
    url: String,
    label: String,
    kind: LinkType,
}

#[derive(Debug, Default)]
struct Writer {
    out: String,
    gap: Option<Gap>,
    at_line_start: bool,
    quote_depth: usize,
    last_line_quoted: bool,
    lists: Vec<List>,
    /// The marker (`• `, `3. `) of a list item whose first line is not written yet.
    marker: Option<String>,
    in_heading: bool,
    in_code_block: bool,
    /// An opening formatting marker is being written.
    opening: bool,
    /// The last thing written was a closing formatting marker.
    closed: bool,
    link: Option<PendingLink>,
}

impl Writer {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => {
                if self.in_code_block {
                    self.write(&escape(&text));
                } else {
                    self.text(&text);
                }
            }
            Event::Code(code) => {
                if self.link.is_some() {
                    self.text(&code);
                } else {
                    self.write(&format!("`{}`", escape(&code)));
                }
            }
            Event::Html(html) | Event::InlineHtml(html) => {
                // Shown as text: Slack renders no HTML, and raw `<…>` would be
                // read as Slack markup.
                self.text(&html);
            }
            Event::InlineMath(math) => self.write(&format!("`{}`", escape(&math))),
            Event::DisplayMath(math) => {
                self.block(Gap::Blank);
                self.write(&format!("```\n{}\n```", escape(&math)));
                self.gap = Some(Gap::Blank);
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(link) = &mut self.link {
                    link.label.push(' ');
                } else {
                    self.write("\n");
                }
            }
            Event::Rule => {
                self.block(Gap::Blank);
                self.write("──────────");
                self.gap = Some(Gap::Blank);
            }
            Event::TaskListMarker(done) => self.write(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(name) => self.text(&format!("[{name}]")),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph => self.block(Gap::Blank),
            Tag::Heading { .. } => {
                self.block(Gap::Blank);
                self.write("*");
                self.in_heading = true;
            }
            Tag::BlockQuote(_) => {
                self.block(Gap::Blank);
                self.quote_depth += 1;
            }
            Tag::CodeBlock(_) => {
                // The fence's language (```rust) means nothing to Slack.
                self.block(Gap::Blank);
                self.write("```\n");
                self.in_code_block = true;
            }
            Tag::HtmlBlock => self.block(Gap::Blank),
            Tag::List(start) => {
                if self.lists.is_empty() {
                    self.block(Gap::Blank);
                } else {
                    self.block(Gap::Line);
                }
                self.lists.push(List { next: start });
            }
            Tag::Item => {
                self.block(Gap::Line);
                let marker = match self.lists.last_mut() {
                    Some(List { next: Some(n) }) => {
                        let marker = format!("{n}. ");
                        *n += 1;
                        marker
                    }
                    _ => "• ".to_string(),
                };
                self.marker = Some(marker);
            }
            Tag::Emphasis => self.mark("_", true),
            Tag::Strong => self.strong(true),
            Tag::Strikethrough => self.mark("~", true),
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => self.begin_link(link_type, &dest_url),
            Tag::Image { dest_url, .. } => self.begin_link(LinkType::Inline, &dest_url),
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock => self.end_block(),
            TagEnd::Heading(_) => {
                self.in_heading = false;
                self.write("*");
                self.gap = Some(Gap::Blank);
            }
            TagEnd::BlockQuote(_) => {
                self.quote_depth = self.quote_depth.saturating_sub(1);
                self.gap = Some(Gap::Blank);
            }
            TagEnd::CodeBlock => {
                self.in_code_block = false;
                if !self.at_line_start {
                    self.write("\n");
                }
                self.write("```");
                self.end_block();
            }
            TagEnd::List(_) => {
                self.lists.pop();
                self.gap = Some(if self.lists.is_empty() {
                    Gap::Blank
                } else {
                    Gap::Line
                });
            }
            TagEnd::Item => {
                if self.marker.is_some() {
                    // An empty item: still show its bullet.
                    self.write("");
                }
                self.gap = Some(Gap::Line);
            }
            TagEnd::Emphasis => self.mark("_", false),
            TagEnd::Strong => self.strong(false),
            TagEnd::Strikethrough => self.mark("~", false),
            TagEnd::Link | TagEnd::Image => self.end_link(),
            _ => {}
        }
    }

    /// Bold, except in headings: they are bold already, and Slack does not
    /// nest `*`.
    fn strong(&mut self, open: bool) {
        if !self.in_heading {
            self.mark("*", open);
        }
    }

    /// A formatting marker; dropped inside link labels, which Slack shows
    /// plainly. Slack only sees markers at word boundaries (`a*b*c` stays
    /// literal, and so does bold inside Chinese text), so a zero-width space
    /// separates a marker from a letter next to it.
    fn mark(&mut self, marker: &str, open: bool) {
        if self.link.is_some() {
            return;
        }
        self.opening = open;
        self.write(marker);
        self.opening = false;
        self.closed = !open;
    }

    fn text(&mut self, text: &str) {
        if let Some(link) = &mut self.link {
            link.label.push_str(text);
        } else {
            self.write(&escape(text));
        }
    }

    fn begin_link(&mut self, kind: LinkType, url: &str) {
        if self.link.is_some() {
            return;
        }
        self.link = Some(PendingLink {
            url: url.to_string(),
            label: String::new(),
            kind,
        });
    }

    fn end_link(&mut self) {
        let Some(link) = self.link.take() else {
            return;
        };
        let label = link.label.trim();
        let url = link.url.trim();
        let rendered = if url.is_empty() {
            escape(label)
        } else if link.kind == LinkType::Email {
            let address = url.trim_start_matches("mailto:");
            format!("<mailto:{}|{}>", link_url(address), escape(address))
        } else if label.is_empty() || label == url || link.kind == LinkType::Autolink {
            format!("<{}>", link_url(url))
        } else {
            format!("<{}|{}>", link_url(url), escape(label))
        };
        self.write(&rendered);
    }

    /// Starts a block: the gap before it is at least `gap` (inside list
    /// items, a line).
    fn block(&mut self, gap: Gap) {
        let gap = if self.lists.is_empty() {
            gap
        } else {
            gap.min(Gap::Line)
        };
        self.gap = Some(self.gap.map_or(gap, |pending| pending.max(gap)));
    }

    fn end_block(&mut self) {
        self.gap = Some(if self.lists.is_empty() {
            Gap::Blank
        } else {
            Gap::Line
        });
    }

    /// Writes already-escaped output, putting pending gaps and line prefixes
    /// (quote marks, list markers and indentation) in front of each line.
    fn write(&mut self, text: &str) {
        if let Some(gap) = self.gap.take()
            && !self.out.is_empty()
        {
            // Raw HTML lines end in a newline of their own.
            if !self.out.ends_with('\n') {
                self.newline();
            }
            if gap == Gap::Blank {
                if self.quote_depth > 0 && self.last_line_quoted {
                    self.out.push('>');
                }
                self.newline();
            }
        }
        if self.out.is_empty() {
            self.at_line_start = true;
        }
        let mut lines = text.split('\n');
        if let Some(first) = lines.next() {
            self.line_part(first);
        }
        for line in lines {
            self.newline();
            self.line_part(line);
        }
    }

    fn newline(&mut self) {
        if !self.out.is_empty() {
            self.out.push('\n');
        }
        self.at_line_start = true;
        self.closed = false;
    }

    fn line_part(&mut self, part: &str) {
        if self.at_line_start && (!part.is_empty() || self.marker.is_some()) {
            self.prefix();
            self.at_line_start = false;
        }
        if let Some(first) = part.chars().next() {
            let glued = if self.opening {
                self.out.chars().next_back().is_some_and(needs_boundary)
            } else {
                self.closed && needs_boundary(first)
            };
            if glued {
                self.out.push(ZERO_WIDTH_SPACE);
            }
            self.closed = false;
        }
        self.out.push_str(part);
    }

    fn prefix(&mut self) {
        self.last_line_quoted = self.quote_depth > 0;
        if self.quote_depth > 0 {
            self.out.push_str("> ");
        }
        let depth = self.lists.len();
        if depth > 1 {
            self.out.push_str(&"    ".repeat(depth - 1));
        }
        match self.marker.take() {
            Some(marker) => self.out.push_str(&marker),
            None if depth > 0 => self.out.push_str("  "),
            None => {}
        }
    }

    fn finish(mut self) -> String {
        if let Some(link) = self.link.take() {
            // Unterminated (cannot happen with pulldown-cmark): keep the label.
            let label = escape(&link.label);
            self.out.push_str(&label);
        }
        let trimmed = self.out.trim_end_matches([' ', '\n']);
        trimmed.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(markdown: &str, expected: &str) {
        assert_eq!(to_mrkdwn(markdown), expected, "markdown: {markdown:?}");
    }

    #[test]
    fn plain_text_stays() {
        check("hello world", "hello world");
        check("", "");
        check("  spaced  ", "spaced");
    }

    #[test]
    fn emphasis() {
        check("**bold** and __bold__", "*bold* and *bold*");
        check("*it* and _it_", "_it_ and _it_");
        check("~~gone~~", "~gone~");
        check("***both***", "_*both*_");
        check("**bold _and italic_**", "*bold _and italic_*");
    }

    #[test]
    fn markers_inside_words_get_zero_width_spaces() {
        check("foo**bar**baz", "foo\u{200B}*bar*\u{200B}baz");
        check("请**务必**注意", "请\u{200B}*务必*\u{200B}注意");
        check(
            "un*frigging*believable",
            "un\u{200B}_frigging_\u{200B}believable",
        );
        // Spaces and ASCII punctuation are boundaries already.
        check("(**x**), **y**.", "(*x*), *y*.");
        check("**a** b", "*a* b");
        check("- **item**", "• *item*");
    }

    #[test]
    fn escapes_everywhere() {
        check("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d");
        check("<!channel> hi", "&lt;!channel&gt; hi");
        check("`a<b>&c`", "`a&lt;b&gt;&amp;c`");
        check("AT&amp;T", "AT&amp;T");
        check("<b>bold?</b>", "&lt;b&gt;bold?&lt;/b&gt;");
    }

    #[test]
    fn raw_html_blocks_are_escaped_text() {
        check(
            "<div class=\"x\">\n<p>hi</p>\n</div>",
            "&lt;div class=\"x\"&gt;\n&lt;p&gt;hi&lt;/p&gt;\n&lt;/div&gt;",
        );
    }

    #[test]
    fn html_blocks_between_paragraphs() {
        check(
            "before\n\n<div>\n</div>\n\nafter",
            "before\n\n&lt;div&gt;\n&lt;/div&gt;\n\nafter",
        );
        check("<br>\n\n- item", "&lt;br&gt;\n\n• item");
        // An HTML block runs to the next blank line.
        check("<br>\n- item", "&lt;br&gt;\n- item");
    }

    #[test]
    fn links() {
        check(
            "[Rust](https://rust-lang.org)",
            "<https://rust-lang.org|Rust>",
        );
        check(
            "<https://example.com/a?b=1&c=2>",
            "<https://example.com/a?b=1&amp;c=2>",
        );
        check(
            "see [the **docs**](https://x.io/a|b) now",
            "see <https://x.io/a%7Cb|the docs> now",
        );
        check("[a < b](https://x.io)", "<https://x.io|a &lt; b>");
        check("[https://x.io](https://x.io)", "<https://x.io>");
        check("<me@example.com>", "<mailto:me@example.com|me@example.com>");
        check("[empty]()", "empty");
    }

    #[test]
    fn images() {
        check(
            "![a cat](https://img.io/cat.png)",
            "<https://img.io/cat.png|a cat>",
        );
        check("![](https://img.io/cat.png)", "<https://img.io/cat.png>");
    }

    #[test]
    fn inline_code_keeps_markup_characters() {
        check("use `**not bold**` here", "use `**not bold**` here");
    }

    #[test]
    fn code_blocks_drop_the_language_and_escape() {
        check(
            "Try:\n\n```rust\nif a < b && c > d {\n    println!(\"<ok>\");\n}\n```\n\nDone.",
            "Try:\n\n```\nif a &lt; b &amp;&amp; c &gt; d {\n    println!(\"&lt;ok&gt;\");\n}\n```\n\nDone.",
        );
        check("    indented\n    code", "```\nindented\ncode\n```");
        check("```\n```", "```\n```");
    }

    #[test]
    fn headings_become_bold_lines() {
        check("# Title\n\nBody", "*Title*\n\nBody");
        check("## A **strong** title", "*A strong title*");
        check("Setext\n======\ntext", "*Setext*\n\ntext");
    }

    #[test]
    fn bullet_lists() {
        check("- one\n- two\n- three", "• one\n• two\n• three");
        check("* a\n  * b\n    * c\n* d", "• a\n    • b\n        • c\n• d");
        check("Intro:\n- x\n- y\n\nAfter.", "Intro:\n\n• x\n• y\n\nAfter.");
    }

    #[test]
    fn ordered_lists() {
        check("1. one\n2. two", "1. one\n2. two");
        check("3. three\n4. four", "3. three\n4. four");
        check("1. a\n   - b\n2. c", "1. a\n    • b\n2. c");
    }

    #[test]
    fn loose_list_items_stay_compact() {
        check(
            "- first\n\n  more about first\n\n- second",
            "• first\n  more about first\n• second",
        );
    }

    #[test]
    fn list_items_with_code() {
        check(
            "1. Run:\n   ```sh\n   cargo test\n   ```\n2. Done",
            "1. Run:\n  ```\n  cargo test\n  ```\n2. Done",
        );
    }

    #[test]
    fn block_quotes() {
        check("> quoted\n> text", "> quoted\n> text");
        check("> one\n>\n> two\n\nout", "> one\n>\n> two\n\nout");
        check("> - a\n> - b", "> • a\n> • b");
    }

    #[test]
    fn breaks() {
        check("line one  \nline two", "line one\nline two");
        check("line one\\\nline two", "line one\nline two");
        check("soft\nbreak", "soft\nbreak");
        check("a\n\n---\n\nb", "a\n\n──────────\n\nb");
    }

    #[test]
    fn chinese_text() {
        check(
            "## 总结\n\n**注意**：请运行 `cargo build`，然后查看[文档](https://example.com/文档)。",
            "*总结*\n\n*注意*\u{200B}：请运行 `cargo build`，然后查看<https://example.com/文档|文档>。",
        );
    }

    #[test]
    fn agent_like_reply() {
        let markdown = "\
Here's how to fix it:

1. Open `src/main.rs`.
2. Replace the comparison:

```rust
if x < 10 && y > 5 {
    return Err(\"out of range\".into());
}
```

3. Run **`cargo test`** again.

Notes:
- See [the book](https://doc.rust-lang.org/book/) for *more*.
- Vec<T> & HashMap<K, V> both work.

> Tip: ~~never~~ always read the error message.";
        let expected = "\
Here's how to fix it:

1. Open `src/main.rs`.
2. Replace the comparison:

```
if x &lt; 10 &amp;&amp; y &gt; 5 {
    return Err(\"out of range\".into());
}
```

3. Run *`cargo test`* again.

Notes:

• See <https://doc.rust-lang.org/book/|the book> for _more_.
• Vec&lt;T&gt; &amp; HashMap&lt;K, V&gt; both work.

> Tip: ~never~ always read the error message.";
        assert_eq!(to_mrkdwn(markdown), expected);
    }

    #[test]
    fn empty_list_items_keep_their_bullet() {
        check("- a\n-\n- c", "• a\n• \n• c");
    }

    #[test]
    fn task_lists_are_not_enabled_and_stay_text() {
        check("- [ ] todo", "• [ ] todo");
    }

    #[test]
    fn output_has_no_raw_angle_brackets_but_links() {
        let out = to_mrkdwn("hi <script>alert(1)</script> [x](https://a.b) <@U123> <!here>");
        assert_eq!(
            out,
            "hi &lt;script&gt;alert(1)&lt;/script&gt; <https://a.b|x> &lt;@U123&gt; &lt;!here&gt;"
        );
        // A line that starts with `<script>` is an HTML block: all of it is text.
        check(
            "<script>alert(1)</script> [x](https://a.b)",
            "&lt;script&gt;alert(1)&lt;/script&gt; [x](https://a.b)",
        );
    }
}
