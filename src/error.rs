//! One error type for loci. Every variant maps to a stable string `code` that JavaScript callers can switch on;
//! messages are for humans and may change.

use thiserror::Error;

/// Everything that can go wrong in loci.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// The caller passed something loci cannot accept (empty text, a wrong type, a bad time…).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The database was built with another embedding model or dimension; vectors are never mixed.
    #[error("model mismatch: {0}")]
    ModelMismatch(String),
    /// The database has a schema this version of loci does not understand.
    #[error("schema mismatch: {0}")]
    SchemaMismatch(String),
    /// The embedding model or tokenizer could not be loaded or run.
    #[error("embedder error: {0}")]
    Embedder(String),
    /// A model or runtime asset could not be fetched, or its checksum did not match.
    #[error("asset error: {0}")]
    Asset(String),
    /// The storage backend failed.
    #[error("storage error: {0}")]
    Storage(String),
    /// The browser refused to store more data.
    #[error("storage quota exceeded: {0}")]
    QuotaExceeded(String),
    /// Another tab holds the database in a way that blocks this one.
    #[error("blocked by another tab: {0}")]
    BlockedByOtherTab(String),
    /// The memory was closed; open it again.
    #[error("memory is closed")]
    Closed,
    /// The requested item does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The LLM endpoint could not be reached or kept failing (network errors, 5xx) after the retries.
    #[error("LLM unavailable: {0}")]
    LlmUnavailable(String),
    /// The LLM endpoint kept answering 429 after the retries, or asked for a longer wait than a call waits out
    /// (`retry_after_ms`, its `Retry-After`: background distillation waits that long before trying again).
    #[error("LLM rate limited: {message}")]
    LlmRateLimited { message: String, retry_after_ms: Option<u64> },
    /// The LLM endpoint refused the request (401, 403, 404, 400…); retrying would not help.
    #[error("LLM request rejected: {0}")]
    LlmRejected(String),
    /// The prompt does not fit the model's context window (the endpoint said so, or loci could not make it fit).
    #[error("LLM context exceeded: {0}")]
    LlmContextExceeded(String),
    /// The LLM answered, but not with something usable (malformed response, or invalid JSON after one retry).
    #[error("LLM bad reply: {0}")]
    LlmBadReply(String),
    /// The caller aborted the operation.
    #[error("aborted")]
    Aborted,
    /// The operation took longer than its time limit.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The browser context lacks something loci cannot do safely without (e.g. Web Locks).
    #[error("unsupported here: {0}")]
    Unsupported(String),
    /// The tab that held the memory went away while this tab's call was in flight there: it may or may not have
    /// been carried out. Later calls go to the tab that leads now.
    #[error("the leading tab went away: {0}")]
    LeaderGone(String),
    /// An encrypted memory was opened without its key, or with a wrong one (nothing was changed).
    #[error("wrong key: {0}")]
    BadKey(String),
    /// A sync could not finish: the server failed or refused, or what it holds is damaged or inconsistent (a
    /// segment that does not open, or two different segments under one name). Nothing of that sync was merged.
    #[error("sync failed: {0}")]
    SyncFailed(String),
}

impl Error {
    /// The stable code exposed to JavaScript as `error.code`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidInput(_) => "INVALID_INPUT",
            Error::ModelMismatch(_) => "MODEL_MISMATCH",
            Error::SchemaMismatch(_) => "SCHEMA_MISMATCH",
            Error::Embedder(_) => "EMBEDDER_FAILED",
            Error::Asset(_) => "ASSET_FAILED",
            Error::Storage(_) => "STORAGE_FAILED",
            Error::QuotaExceeded(_) => "QUOTA_EXCEEDED",
            Error::BlockedByOtherTab(_) => "BLOCKED_BY_OTHER_TAB",
            Error::Closed => "CLOSED",
            Error::NotFound(_) => "NOT_FOUND",
            Error::LlmUnavailable(_) => "LLM_UNAVAILABLE",
            Error::LlmRateLimited { .. } => "LLM_RATE_LIMITED",
            Error::LlmRejected(_) => "LLM_REJECTED",
            Error::LlmContextExceeded(_) => "LLM_CONTEXT_EXCEEDED",
            Error::LlmBadReply(_) => "LLM_BAD_REPLY",
            Error::Aborted => "ABORTED",
            Error::BadKey(_) => "BAD_KEY",
            Error::Timeout(_) => "TIMEOUT",
            Error::Unsupported(_) => "UNSUPPORTED",
            Error::LeaderGone(_) => "LEADER_GONE",
            Error::SyncFailed(_) => "SYNC_FAILED",
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }
}

/// Result with loci's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
