//! Choosing the model provider from the options: a named provider, a base URL, a key in the
//! environment, or the offline demo model.

use noetic_core::ModelProvider;
use noetic_providers::{
    Anthropic, ChatCompletions, DemoModel, OpenAI, OpenResponses, OpenRouter, ProviderError,
};

use crate::args::Options;

/// The chosen provider, and the demo server to keep alive while it is used.
pub(crate) struct Chosen {
    pub(crate) name: String,
    pub(crate) provider: Box<dyn ModelProvider>,
    /// The model to use for nodes that name none, when the provider implies one.
    pub(crate) default_model: Option<String>,
    pub(crate) _demo: Option<DemoModel>,
}

fn key_from(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|key| !key.trim().is_empty())
}

/// Picks the provider. Without a provider, base URL or key, the demo model, announced on stderr.
///
/// # Errors
/// A missing key or base URL, named.
pub(crate) async fn choose(options: &Options) -> Result<Chosen, ProviderError> {
    let custom_key = options.api_key_env.as_deref().and_then(key_from);
    let provider = match (&options.provider, &options.base_url) {
        (Some(provider), _) => provider.clone(),
        (None, Some(_)) => "responses".to_owned(),
        (None, None) if custom_key.is_some() || key_from(OpenRouter::API_KEY_VAR).is_some() => {
            "openrouter".to_owned()
        }
        (None, None) => "demo".to_owned(),
    };
    let simple = |provider: Box<dyn ModelProvider>, name: &str| Chosen {
        name: name.to_owned(),
        provider,
        default_model: None,
        _demo: None,
    };
    let need_key = |default_var: &'static str| -> Result<String, ProviderError> {
        match &options.api_key_env {
            Some(var) => key_from(var).ok_or(ProviderError::InvalidConfig {
                field: "--api-key-env",
                message: format!("the env var `{var}` is not set"),
            }),
            None => key_from(default_var).ok_or(ProviderError::MissingApiKey {
                env_var: default_var,
            }),
        }
    };
    Ok(match provider.as_str() {
        "openrouter" => {
            let mut builder =
                OpenRouter::builder(need_key(OpenRouter::API_KEY_VAR)?).header("x-title", "noetic");
            if let Some(base_url) = &options.base_url {
                builder = builder.base_url(base_url);
            }
            simple(Box::new(builder.build()?), "openrouter")
        }
        "openai" => {
            let mut builder = OpenAI::builder(need_key(OpenAI::API_KEY_VAR)?);
            if let Some(base_url) = &options.base_url {
                builder = builder.base_url(base_url);
            }
            simple(Box::new(builder.build()?), "openai")
        }
        "anthropic" => {
            let mut builder = Anthropic::builder(need_key(Anthropic::API_KEY_VAR)?);
            if let Some(base_url) = &options.base_url {
                builder = builder.base_url(base_url);
            }
            simple(Box::new(builder.build()?), "anthropic")
        }
        "responses" | "chat" => {
            let base_url = options
                .base_url
                .clone()
                .ok_or(ProviderError::InvalidConfig {
                    field: "--base-url",
                    message: format!("--provider {provider} needs --base-url"),
                })?;
            if provider == "chat" {
                let mut builder = ChatCompletions::builder(base_url).name("chat");
                if let Some(key) = custom_key {
                    builder = builder.api_key(key);
                }
                simple(Box::new(builder.build()?), "chat")
            } else {
                let mut builder = OpenResponses::builder(base_url).name("responses");
                if let Some(key) = custom_key {
                    builder = builder.api_key(key);
                }
                simple(Box::new(builder.build()?), "responses")
            }
        }
        _ => {
            let demo = DemoModel::start().await?;
            eprintln!(
                "note: no API key set; using the offline demo model at {}",
                demo.base_url()
            );
            Chosen {
                name: "demo".to_owned(),
                provider: Box::new(demo.provider()?),
                default_model: Some(noetic_providers::DEMO_MODEL_ID.to_owned()),
                _demo: Some(demo),
            }
        }
    })
}
