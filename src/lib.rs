//! loci: long-term memory for chatbots that runs entirely in the browser.
//!
//! The modules read as the pipeline: types → text → embed → index → recall → memory → web bindings.

pub mod error;
pub mod text;

pub use error::{Error, Result};
