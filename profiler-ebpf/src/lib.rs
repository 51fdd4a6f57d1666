#![no_std]
// The programs live in the binary (main.rs lists its modules, one per source); this library
// target only exists so that profiler can name this crate as a build dependency (which tells
// cargo when to rebuild the programs).
