//! The hossted-operator: keeps an inventory of every Helm release in a
//! cluster and reports it to the Hossted API. `main.rs` is the CLI; the
//! pieces live here so they can be tested on their own.

pub mod collector;
pub mod controller;
pub mod duration;
pub mod helm;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod objects;
pub mod payload;
pub mod poster;
pub mod quantity;
