//! The model's own chat template (`tokenizer.chat_template`, Jinja) rendered
//! with minijinja in the way Hugging Face renders it (trim_blocks,
//! lstrip_blocks, loop controls, Python string methods); ChatML when the
//! file has none.

use minijinja::{Environment, Error, ErrorKind, context};
use serde_json::Value;

const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

pub struct ChatTemplate {
    env: Environment<'static>,
    pub source_is_model: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_is_model", &self.source_is_model)
            .finish_non_exhaustive()
    }
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

impl ChatTemplate {
    /// `source`: the GGUF's template, if any. Errors describe a template that
    /// does not parse.
    pub fn new(source: Option<&str>) -> Result<Self, crate::gateway::llm::TemplateError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| format!("{e:#}"))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        let source_is_model = source.is_some();
        env.add_template_owned("chat", source.unwrap_or(CHATML).to_owned())
            .map_err(|e| format!("{e:#}"))?;
        Ok(ChatTemplate {
            env,
            source_is_model,
        })
    }

    /// Renders `messages` (already normalised: `role` and string `content`)
    /// with the generation prompt appended.
    pub fn render(
        &self,
        messages: &[Value],
        tools: Option<&Value>,
        bos: &str,
        eos: &str,
    ) -> Result<String, crate::gateway::llm::TemplateError> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| format!("{e:#}"))?;
        template
            .render(context! {
                messages => minijinja::Value::from(minijinja::value::Serde(messages)),
                tools => minijinja::Value::from(minijinja::value::Serde(tools)),
                add_generation_prompt => true,
                bos_token => bos,
                eos_token => eos,
            })
            .map_err(|e| crate::gateway::llm::TemplateError(format!("{e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_the_models_template() {
        let t = ChatTemplate::new(Some(SMOLLM2)).unwrap();
        let out = t
            .render(&[json!({"role": "user", "content": "Hi"})], None, "", "")
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
             Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn chatml_fallback_and_python_methods() {
        let t = ChatTemplate::new(None).unwrap();
        let out = t
            .render(
                &[
                    json!({"role": "system", "content": "S"}),
                    json!({"role": "user", "content": "U"}),
                ],
                None,
                "",
                "",
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
        );
        let t = ChatTemplate::new(Some(
            "{% for m in messages %}{{ m['content'].strip() }}{% if m.role == 'x' %}{{ raise_exception('no x') }}{% endif %}{% endfor %}",
        ))
        .unwrap();
        assert_eq!(
            t.render(&[json!({"role": "user", "content": "  a "})], None, "", "")
                .unwrap(),
            "a"
        );
        let err = t
            .render(&[json!({"role": "x", "content": ""})], None, "", "")
            .unwrap_err();
        assert!(err.0.contains("no x"), "{err}");
    }

    #[test]
    fn broken_templates_are_reported() {
        assert!(ChatTemplate::new(Some("{% for %}")).is_err());
    }
}
