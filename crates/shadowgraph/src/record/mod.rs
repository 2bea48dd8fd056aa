//! Recording (design §5): each traced thread writes 16-byte entry/exit
//! records with raw timestamps into a ring of its own; the writer drains the
//! rings into `<tid>.dat` files of a data directory (`shadowgraph_data`).

pub mod collect;
pub mod ring;
pub mod shm;
pub mod writer;
