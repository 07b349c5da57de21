//! Text: the WordPiece tokenizer of the embedding model, and the pairing of turns into embedded units.

pub mod wordpiece;

pub use wordpiece::WordPiece;
