//! The agent's Markdown as a Feishu rich-text (`post`) message.
//!
//! Why `post` and not a card (`interactive` with a `markdown` element): a
//! post is an ordinary chat message — it can be quoted, searched, forwarded
//! and replied to in a thread like any other, needs no card permissions and
//! has no card-specific rendering quirks; its elements cover what agents
//! write (paragraphs, links, code blocks, emphasis). Lists, headings and
//! quotes become text with prefixes.
//!
//! Post schema from Feishu's "发送消息内容结构 / Send message content"
//! (https://open.feishu.cn/document/server-docs/im-v1/message-content-description/create_json):
//! `{"zh_cn": {"title": "", "content": [[element, …], …]}}`, one inner list
//! per line; elements `{"tag": "text", "text", "style": ["bold", "italic",
//! "underline", "lineThrough"]}`, `{"tag": "a", "text", "href"}`,
//! `{"tag": "code_block", "language", "text"}`, `{"tag": "hr"}`.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use serde_json::{Value, json};

#[derive(Default)]
struct Builder {
    lines: Vec<Vec<Value>>,
    line: Vec<Value>,
    bold: u32,
    italic: u32,
    strike: u32,
    links: Vec<String>,
    /// Per open list: the next number (`None`: bullets).
    lists: Vec<Option<u64>>,
    quote: u32,
    code: Option<(String, String)>,
    /// A blank line goes before the next block.
    gap: bool,
}

impl Builder {
    fn style(&self) -> Vec<&'static str> {
        let mut style = Vec::new();
        if self.bold > 0 {
            style.push("bold");
        }
        if self.italic > 0 {
            style.push("italic");
        }
        if self.strike > 0 {
            style.push("lineThrough");
        }
        style
    }

    fn start_line(&mut self) {
        if self.gap && !self.lines.is_empty() {
            self.lines.push(vec![json!({"tag": "text", "text": ""})]);
        }
        self.gap = false;
        if self.line.is_empty() && self.quote > 0 {
            self.plain(&"> ".repeat(self.quote as usize));
        }
    }

    /// Text without the current style (prefixes).
    fn plain(&mut self, text: &str) {
        self.line.push(json!({"tag": "text", "text": text}));
    }

    fn text(&mut self, text: &str) {
        if self.line.is_empty() {
            self.start_line();
        }
        if let Some(href) = self.links.last() {
            let el = json!({"tag": "a", "text": text, "href": href});
            self.line.push(el);
            return;
        }
        let style = self.style();
        // Merge with the previous text element of the same style.
        if let Some(last) = self.line.last_mut()
            && last["tag"] == "text"
            && last
                .get("style")
                .map_or(style.is_empty(), |s| *s == json!(style))
            && !last["text"].as_str().unwrap_or("").starts_with('>')
        {
            let merged = format!("{}{text}", last["text"].as_str().unwrap_or(""));
            last["text"] = json!(merged);
            return;
        }
        let mut el = json!({"tag": "text", "text": text});
        if !style.is_empty() {
            el["style"] = json!(style);
        }
        self.line.push(el);
    }

    fn end_line(&mut self) {
        if !self.line.is_empty() {
            self.lines.push(std::mem::take(&mut self.line));
        }
    }

    fn end_block(&mut self) {
        self.end_line();
        if self.lists.is_empty() {
            self.gap = true;
        }
    }

    fn own_line(&mut self, el: Value) {
        self.end_line();
        self.start_line();
        self.lines.push(vec![el]);
    }
}

/// The `content` JSON (as a value; the API wants it as a string) of a post
/// with the Markdown `markdown`.
pub fn post_content(markdown: &str) -> Value {
    let mut b = Builder::default();
    let options =
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(markdown, options) {
        if let Some((_, code)) = b.code.as_mut() {
            match event {
                Event::Text(t) => code.push_str(&t),
                Event::End(TagEnd::CodeBlock) => {
                    let (lang, code) = b.code.take().unwrap_or_default();
                    let mut el = json!({"tag": "code_block", "text": code.trim_end_matches('\n')});
                    if !lang.is_empty() {
                        el["language"] = json!(lang.to_uppercase());
                    }
                    b.own_line(el);
                    b.end_block();
                }
                _ => {}
            }
            continue;
        }
        match event {
            Event::Start(Tag::Heading { level, .. }) => {
                b.end_line();
                b.bold += 1;
                if level == HeadingLevel::H1 || level == HeadingLevel::H2 {
                    b.start_line();
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                b.bold -= 1;
                b.end_block();
            }
            Event::Start(Tag::Paragraph) => {}
            Event::End(TagEnd::Paragraph) => b.end_block(),
            Event::Start(Tag::BlockQuote(_)) => {
                b.end_line();
                b.quote += 1;
            }
            Event::End(TagEnd::BlockQuote(_)) => {
                b.quote -= 1;
                b.end_block();
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => {
                        info.split_whitespace().next().unwrap_or("").to_string()
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                b.code = Some((lang, String::new()));
            }
            Event::Start(Tag::List(first)) => {
                b.end_line();
                b.lists.push(first);
            }
            Event::End(TagEnd::List(_)) => {
                b.lists.pop();
                b.end_block();
            }
            Event::Start(Tag::Item) => {
                b.end_line();
                b.start_line();
                let depth = b.lists.len().saturating_sub(1);
                let marker = match b.lists.last_mut() {
                    Some(Some(n)) => {
                        *n += 1;
                        format!("{}. ", *n - 1)
                    }
                    _ => "• ".to_string(),
                };
                b.plain(&format!("{}{marker}", "    ".repeat(depth)));
            }
            Event::End(TagEnd::Item) => b.end_line(),
            Event::TaskListMarker(done) => b.text(if done { "☑ " } else { "☐ " }),
            Event::Start(Tag::Emphasis) => b.italic += 1,
            Event::End(TagEnd::Emphasis) => b.italic -= 1,
            Event::Start(Tag::Strong) => b.bold += 1,
            Event::End(TagEnd::Strong) => b.bold -= 1,
            Event::Start(Tag::Strikethrough) => b.strike += 1,
            Event::End(TagEnd::Strikethrough) => b.strike -= 1,
            Event::Start(Tag::Link { dest_url, .. }) => b.links.push(dest_url.to_string()),
            Event::End(TagEnd::Link) => {
                b.links.pop();
            }
            Event::Start(Tag::Image { dest_url, .. }) => b.links.push(dest_url.to_string()),
            Event::End(TagEnd::Image) => {
                b.links.pop();
            }
            Event::Start(Tag::TableRow) | Event::Start(Tag::TableHead) => b.end_line(),
            Event::End(TagEnd::TableCell) => b.text(" | "),
            Event::End(TagEnd::TableRow) | Event::End(TagEnd::TableHead) => {
                if let Some(last) = b.line.last_mut() {
                    let t = last["text"]
                        .as_str()
                        .unwrap_or("")
                        .trim_end_matches(" | ")
                        .to_string();
                    last["text"] = json!(t);
                }
                b.end_line();
            }
            Event::End(TagEnd::Table) => b.end_block(),
            Event::Code(code) => b.text(&format!("`{code}`")),
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => {
                let mut first = true;
                for part in t.split('\n') {
                    if !first {
                        b.end_line();
                    }
                    first = false;
                    if !part.is_empty() {
                        b.text(part);
                    }
                }
            }
            Event::SoftBreak | Event::HardBreak => b.end_line(),
            Event::Rule => {
                b.own_line(json!({"tag": "hr"}));
                b.end_block();
            }
            Event::FootnoteReference(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                b.text(&t)
            }
            _ => {}
        }
    }
    b.end_line();
    if b.lines.is_empty() {
        b.lines.push(vec![json!({"tag": "text", "text": " "})]);
    }
    json!({ "zh_cn": { "title": "", "content": b.lines } })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(markdown: &str) -> Vec<Value> {
        post_content(markdown)["zh_cn"]["content"]
            .as_array()
            .expect("content")
            .clone()
    }

    #[test]
    fn agent_reply_with_code_links_lists_and_chinese() {
        let md = "## 结果\n\n构建**成功**了，见 [日志](https://ci.example.com/run/1)。\n\n\
                  - 第一步：`cargo build`\n- 第二步\n  1. 子项\n\n\
                  ```rust\nfn main() {\n    println!(\"你好\");\n}\n```\n\n> 注意 *这里*\n\n---\n\n~~旧~~ 新";
        let got = lines(md);
        let expected = json!([
            [{"tag": "text", "text": "结果", "style": ["bold"]}],
            [{"tag": "text", "text": ""}],
            [
                {"tag": "text", "text": "构建"},
                {"tag": "text", "text": "成功", "style": ["bold"]},
                {"tag": "text", "text": "了，见 "},
                {"tag": "a", "text": "日志", "href": "https://ci.example.com/run/1"},
                {"tag": "text", "text": "。"}
            ],
            [{"tag": "text", "text": ""}],
            [{"tag": "text", "text": "• 第一步：`cargo build`"}],
            [{"tag": "text", "text": "• 第二步"}],
            [{"tag": "text", "text": "    1. 子项"}],
            [{"tag": "text", "text": ""}],
            [{"tag": "code_block", "language": "RUST", "text": "fn main() {\n    println!(\"你好\");\n}"}],
            [{"tag": "text", "text": ""}],
            [{"tag": "text", "text": "> "}, {"tag": "text", "text": "注意 "}, {"tag": "text", "text": "这里", "style": ["italic"]}],
            [{"tag": "text", "text": ""}],
            [{"tag": "hr"}],
            [{"tag": "text", "text": ""}],
            [{"tag": "text", "text": "旧", "style": ["lineThrough"]}, {"tag": "text", "text": " 新"}]
        ]);
        assert_eq!(Value::Array(got), expected);
    }

    #[test]
    fn line_breaks_plain_fences_and_empty() {
        let got = lines("one\ntwo\n\n```\nno lang\n```");
        assert_eq!(
            Value::Array(got),
            json!([
                [{"tag": "text", "text": "one"}],
                [{"tag": "text", "text": "two"}],
                [{"tag": "text", "text": ""}],
                [{"tag": "code_block", "text": "no lang"}]
            ])
        );
        assert_eq!(
            Value::Array(lines("")),
            json!([[{"tag": "text", "text": " "}]])
        );
        let numbered = lines("3. c\n4. d");
        assert_eq!(numbered[0], json!([{"tag": "text", "text": "3. c"}]));
        assert_eq!(numbered[1], json!([{"tag": "text", "text": "4. d"}]));
    }

    #[test]
    fn tables_become_rows() {
        let got = lines("| a | b |\n|---|---|\n| 1 | 2 |");
        assert_eq!(got[0], json!([{"tag": "text", "text": "a | b"}]));
        assert_eq!(got[1], json!([{"tag": "text", "text": "1 | 2"}]));
    }
}
