//! Why a core operation was refused.

use super::filter::PatternError;
use crate::arena::ArenaError;
use crate::patch::PatchError;
use std::fmt;

/// Why a core operation was refused. The state is as before the call.
#[derive(Debug)]
pub enum CoreError {
    /// The ops is registered already.
    AlreadyRegistered,
    /// The ops is not registered.
    NotRegistered,
    /// A site already has a DIRECT or IPMODIFY ops that conflicts.
    Busy {
        /// The function of the site in conflict.
        function: String,
    },
    /// A request that makes no sense (what is wrong with it).
    Invalid(String),
    /// A filter pattern is bad or matches nothing.
    Filter(PatternError),
    /// The sites could not be patched.
    Patch(PatchError),
    /// No trampoline memory within reach.
    Arena(ArenaError),
}

impl fmt::Display for CoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreError::AlreadyRegistered => write!(f, "ops already registered"),
            CoreError::NotRegistered => write!(f, "ops not registered"),
            CoreError::Busy { function } => {
                write!(f, "{function} already has a direct or IP-modifying ops")
            }
            CoreError::Invalid(s) => write!(f, "{s}"),
            CoreError::Filter(e) => write!(f, "{e}"),
            CoreError::Patch(e) => write!(f, "{e}"),
            CoreError::Arena(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CoreError {}

impl From<PatternError> for CoreError {
    fn from(e: PatternError) -> Self {
        CoreError::Filter(e)
    }
}
