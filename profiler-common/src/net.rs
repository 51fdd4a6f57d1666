//! Network: an exec's socket traffic, its namespaces and their interfaces.

/// Traffic of an exec's sockets, counted by cgroup_skb programs on the attached subtree, by
/// the cgroup of the socket. Bytes are IP packet lengths (from the IP header on); a packet
/// offloaded as one large segment counts once.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockTraffic {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    /// The part of the above that went over a loopback device.
    pub lo_rx_bytes: u64,
    pub lo_rx_packets: u64,
    pub lo_tx_bytes: u64,
    pub lo_tx_packets: u64,
}

/// A network namespace that an exec's tasks run in, other than the host's (value of the
/// netns map, keyed by the address of its `struct net`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetnsEntry {
    pub exec_id: u64,
    /// The namespace's inode number (as in /proc/PID/ns/net).
    pub inum: u32,
    pub _pad: u32,
}

/// Key of an exec's per-interface counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IfaceKey {
    pub exec_id: u64,
    pub netns_inum: u32,
    pub ifindex: u32,
}

pub const IFNAME_LEN: usize = 16;

/// An interface's traffic while it belonged to an exec, counted the way the interface counts
/// it (bytes with the link-layer header): at transmit (net_dev_xmit) and at receive
/// (netif_receive_skb).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IfaceTraffic {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    /// Interface name when first seen.
    pub name: [u8; IFNAME_LEN],
    /// ARPHRD_* type of the device (772: loopback).
    pub dev_type: u32,
    pub _pad: u32,
}

pub const ARPHRD_LOOPBACK: u32 = 772;
