//! A record, holding a ledger named through the crate root's re-export.
use crate::Ledger;

pub struct Record(pub Option<Ledger>);
