//! What goes wrong reading a recording: always a file and what is wrong
//! with it (for records, the byte offset).

use std::fmt;
use std::path::{Path, PathBuf};

/// A recording that cannot be read as it should.
#[derive(Debug, Clone)]
pub struct DataError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for DataError {}

pub(crate) fn err(path: &Path, message: impl Into<String>) -> DataError {
    DataError {
        path: path.to_owned(),
        message: message.into(),
    }
}
