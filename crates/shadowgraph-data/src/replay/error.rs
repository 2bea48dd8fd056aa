//! Why a view could not be written.

use crate::dir::DataError;
use std::io;

/// Why a view could not be written.
#[derive(Debug)]
pub enum ReplayError {
    /// The recording cannot be read.
    Data(DataError),
    /// The output cannot be written.
    Io(io::Error),
    /// A filter the recording cannot satisfy (e.g. a pattern matching none
    /// of its functions).
    Filter(String),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Data(e) => write!(f, "{e}"),
            ReplayError::Io(e) => write!(f, "{e}"),
            ReplayError::Filter(e) => write!(f, "{e}"),
        }
    }
}

impl From<DataError> for ReplayError {
    fn from(e: DataError) -> Self {
        ReplayError::Data(e)
    }
}

impl From<io::Error> for ReplayError {
    fn from(e: io::Error) -> Self {
        ReplayError::Io(e)
    }
}
