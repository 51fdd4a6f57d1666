//! Test workload: spin on the CPU, in user mode, for the given number of microseconds of wall
//! time.
use std::time::{Duration, Instant};

fn main() {
    let us: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let end = Instant::now() + Duration::from_micros(us);
    let mut x = 0u64;
    // The clock is read every 16k rounds (about 16 us here): where the kernel offers no vDSO
    // clock (seen in a 6.1 guest under TCG), each read is a system call, and reading it every
    // round made the spin 95% system time.
    while Instant::now() < end {
        for _ in 0..16_384 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        x = std::hint::black_box(x);
    }
}
