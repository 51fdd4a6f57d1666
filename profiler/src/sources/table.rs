//! The open-addressing tables the kernel programs look up on every event (`CGROUPS`, and
//! `EXEC_OWNERS` beside `EXECS`; see profiler-common exec.rs), mapped into the profiler and
//! changed in place with the same atomics the programs use.

use std::{
    os::fd::{AsFd as _, AsRawFd as _},
    sync::atomic::{AtomicU64, Ordering},
};

use anyhow::{Result, bail};
use aya::maps::MapData;
use profiler_common::table_probe;

/// The memory of a BPF array created with BPF_F_MMAPABLE, mapped into the profiler: read and
/// changed in place, as the kernel programs do, without a system call per element. (The
/// mapping keeps the map alive.) Each element starts with its owner, a u64 (0: free).
pub struct MappedArray<T> {
    ptr: *mut T,
    len: usize,
    backing: Backing,
}

enum Backing {
    /// A shared mapping of this many bytes.
    Mapped(usize),
    /// Heap memory, for tests.
    #[cfg(test)]
    Heap(std::alloc::Layout),
}

// SAFETY: the mapping is plain shared memory; every access goes through volatile reads or
// atomics.
unsafe impl<T> Send for MappedArray<T> {}
// SAFETY: as above: shared use is what the kernel programs do to the same memory.
unsafe impl<T> Sync for MappedArray<T> {}

impl<T: Copy> MappedArray<T> {
    pub fn new(map: &MapData, len: u32) -> Result<Self> {
        let len = len as usize;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let bytes = (len * size_of::<T>()).div_ceil(page) * page;
        let fd = map.fd().as_fd().as_raw_fd();
        // SAFETY: a shared mapping of the map's fd, of the map's size, unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            bail!(
                "cannot map a BPF array into memory: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Self {
            ptr: ptr as *mut T,
            len,
            backing: Backing::Mapped(bytes),
        })
    }

    /// A zeroed table of `len` elements on the heap.
    #[cfg(test)]
    fn on_heap(len: usize) -> Self {
        let layout = std::alloc::Layout::array::<T>(len)
            .and_then(|l| l.align_to(8))
            .expect("a small table");
        // SAFETY: a non-zero size (tests use len > 0); freed with the same layout on drop.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
        assert!(!ptr.is_null());
        Self {
            ptr,
            len,
            backing: Backing::Heap(layout),
        }
    }

    /// A copy of element `i` (fields may change while it is read; callers check).
    pub fn read(&self, i: usize) -> T {
        assert!(i < self.len);
        // SAFETY: in bounds of the mapping.
        unsafe { std::ptr::read_volatile(self.ptr.add(i)) }
    }

    /// Write `v` at byte offset `off` of element `i`, with volatile stores.
    ///
    /// # Safety
    /// No kernel program may write those bytes meanwhile.
    pub unsafe fn write_field<V: Copy>(&self, i: usize, off: usize, v: V) {
        assert!(i < self.len && off + size_of::<V>() <= size_of::<T>());
        // SAFETY: in bounds; the caller rules out concurrent writers.
        unsafe {
            std::ptr::write_volatile(
                (self.ptr as *mut u8).add(i * size_of::<T>() + off) as *mut V,
                v,
            )
        }
    }

    /// The u64 at byte offset `off` of element `i`, for atomic access.
    pub fn atomic_u64(&self, i: usize, off: usize) -> &AtomicU64 {
        assert!(i < self.len && off + 8 <= size_of::<T>() && off.is_multiple_of(8));
        // SAFETY: in bounds, 8-aligned (the mapping is page-aligned and T's size a multiple of
        // 8 here), and the kernel accesses it only atomically or as a whole u64.
        unsafe {
            AtomicU64::from_ptr((self.ptr as *mut u8).add(i * size_of::<T>() + off) as *mut u64)
        }
    }

    /// The owner of element `i`.
    fn owner(&self, i: usize) -> &AtomicU64 {
        self.atomic_u64(i, 0)
    }

    /// `key`'s probe sequence: `probes` slots, no more than the table has (a sequence longer
    /// than the table comes back to its start; the kernel's lookups past the end find nothing).
    fn probe_sequence(&self, key: u64, probes: u32) -> impl Iterator<Item = usize> + use<T> {
        let n = self.len as u32;
        (0..probes.min(n)).map(move |i| table_probe(key, n, i) as usize)
    }

    /// The slot `key` owns, if any.
    pub fn find_slot(&self, key: u64, probes: u32) -> Option<usize> {
        self.probe_sequence(key, probes)
            .find(|&j| self.owner(j).load(Ordering::Acquire) == key)
    }

    /// Take `key`'s slot as the kernel programs do (`exec_slot`, `insert_entry` in
    /// profiler-ebpf): the first of its probe sequence that it owns or that is free. Returns
    /// (slot, newly taken), or None when the table is full. `placeholder`: the owner while
    /// the slot is being filled (0: none, the slot is usable as soon as it is owned).
    pub fn take_slot(&self, key: u64, probes: u32, placeholder: u64) -> Option<(usize, bool)> {
        for j in self.probe_sequence(key, probes) {
            let owner = self.owner(j);
            let o = owner.load(Ordering::Acquire);
            if o == key {
                return Some((j, false));
            }
            if o == 0 {
                let claim = if placeholder == 0 { key } else { placeholder };
                match owner.compare_exchange(0, claim, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return Some((j, true)),
                    Err(now) if now == key => return Some((j, false)),
                    Err(_) => {}
                }
            }
        }
        None
    }

    /// Make slot `j` the one of `key` (after a placeholder claim), or free it (`key` 0).
    pub fn set_owner(&self, j: usize, key: u64) {
        self.owner(j).store(key, Ordering::Release);
    }
}

impl<T> Drop for MappedArray<T> {
    fn drop(&mut self) {
        match self.backing {
            // SAFETY: the mapping made in new().
            Backing::Mapped(bytes) => unsafe {
                libc::munmap(self.ptr as *mut libc::c_void, bytes);
            },
            // SAFETY: allocated in on_heap() with this layout.
            #[cfg(test)]
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr as *mut u8, layout) },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::HashSet, sync::Arc};

    use profiler_common::{CgroupEntry, CgroupSlot, EXEC_PROBES, TABLE_PROBES};

    use super::*;

    /// Keys whose probe sequences start at the same slot of an `n`-slot table.
    fn colliding(n: u32, count: usize) -> Vec<u64> {
        let start = table_probe(1, n, 0);
        (1..)
            .filter(|&k| table_probe(k, n, 0) == start)
            .take(count)
            .collect()
    }

    #[test]
    fn a_key_takes_the_first_free_slot_of_its_sequence_and_is_found_there() {
        let t = MappedArray::<u64>::on_heap(64);
        let keys = colliding(64, 3);
        let mut slots = Vec::new();
        for (i, &k) in keys.iter().enumerate() {
            let (j, new) = t.take_slot(k, EXEC_PROBES, 0).unwrap();
            assert!(new);
            assert_eq!(j, table_probe(k, 64, i as u32) as usize, "probe {i}");
            slots.push(j);
        }
        for (&k, &j) in keys.iter().zip(&slots) {
            assert_eq!(t.find_slot(k, EXEC_PROBES), Some(j));
            assert_eq!(
                t.take_slot(k, EXEC_PROBES, 0),
                Some((j, false)),
                "taken again"
            );
        }
        assert_eq!(t.find_slot(keys[2] + 1_000_000, EXEC_PROBES), None);
    }

    #[test]
    fn a_freed_slot_is_taken_again_and_later_keys_stay_found() {
        let t = MappedArray::<u64>::on_heap(64);
        let keys = colliding(64, 3);
        let slots: Vec<usize> = keys
            .iter()
            .map(|&k| t.take_slot(k, TABLE_PROBES, 0).unwrap().0)
            .collect();
        t.set_owner(slots[0], 0);
        // The key after the hole is still found: lookups go on past free slots.
        assert_eq!(t.find_slot(keys[1], TABLE_PROBES), Some(slots[1]));
        assert_eq!(t.find_slot(keys[2], TABLE_PROBES), Some(slots[2]));
        let newcomer = colliding(64, 4)[3];
        assert_eq!(
            t.take_slot(newcomer, TABLE_PROBES, 0),
            Some((slots[0], true))
        );
    }

    #[test]
    fn a_full_sequence_is_refused() {
        let t = MappedArray::<u64>::on_heap(64);
        let keys = colliding(64, TABLE_PROBES as usize + 1);
        for &k in &keys[..TABLE_PROBES as usize] {
            assert!(t.take_slot(k, TABLE_PROBES, 0).is_some());
        }
        assert_eq!(
            t.take_slot(keys[TABLE_PROBES as usize], TABLE_PROBES, 0),
            None
        );
    }

    #[test]
    fn a_table_smaller_than_the_probe_count_fills_up_without_going_out_of_bounds() {
        // --max-execs 1: two slots, 32 probes.
        let t = MappedArray::<u64>::on_heap(2);
        let taken: Vec<_> = (1..=5).map(|k| t.take_slot(k, EXEC_PROBES, 0)).collect();
        assert_eq!(taken.iter().filter(|s| s.is_some()).count(), 2, "{taken:?}");
        for k in 1..=5 {
            let found = t.find_slot(k, EXEC_PROBES);
            assert_eq!(found.is_some(), taken[k as usize - 1].is_some());
        }
    }

    #[test]
    fn a_placeholder_hides_the_entry_until_it_is_written() {
        let t = MappedArray::<CgroupSlot>::on_heap(16);
        let (j, new) = t.take_slot(42, TABLE_PROBES, u64::MAX).unwrap();
        assert!(new);
        assert_eq!(
            t.find_slot(42, TABLE_PROBES),
            None,
            "not visible while being filled"
        );
        let entry = CgroupEntry {
            exec_id: 7,
            depth: 1,
            slot: 3,
        };
        // SAFETY: heap memory, no other writer.
        unsafe { t.write_field(j, 8, entry) };
        t.set_owner(j, 42);
        let got = t.read(t.find_slot(42, TABLE_PROBES).unwrap()).entry;
        assert_eq!((got.exec_id, got.depth, got.slot), (7, 1, 3));
    }

    #[test]
    fn racing_takers_never_share_a_slot() {
        let t = Arc::new(MappedArray::<u64>::on_heap(4096));
        let threads: Vec<_> = (0..4u64)
            .map(|n| {
                let t = Arc::clone(&t);
                // Two threads per key range: each key is taken twice at once.
                std::thread::spawn(move || {
                    let base = (n / 2) * 1000 + 1;
                    (base..base + 1000)
                        .map(|k| (k, t.take_slot(k, EXEC_PROBES, 0).unwrap()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut by_key = std::collections::HashMap::new();
        let mut new_count = 0;
        for h in threads {
            for (k, (j, new)) in h.join().unwrap() {
                new_count += new as usize;
                assert_eq!(*by_key.entry(k).or_insert(j), j, "key {k} in two slots");
            }
        }
        assert_eq!(new_count, 2000, "each key newly taken once");
        let slots: HashSet<usize> = by_key.values().copied().collect();
        assert_eq!(slots.len(), 2000, "no slot shared by two keys");
        for (k, j) in by_key {
            assert_eq!(t.find_slot(k, EXEC_PROBES), Some(j));
        }
    }
}
