//! Text: the WordPiece tokenizer of the embedding model, the pairing of turns into embedded units, and relative
//! time expressions made absolute.

pub mod relative;
pub mod wordpiece;

pub use wordpiece::WordPiece;
