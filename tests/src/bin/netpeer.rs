//! Test workload: a TCP transfer of known size.
//!
//! `netpeer serve ADDR`: accept connections one at a time; each sends a 16-byte header (bytes
//! up, bytes down as little-endian u64), then the up bytes; the server answers with the down
//! bytes and closes once the client has closed. Prints "ready" when listening, and before each
//! close the TCP_INFO line below of its own socket.
//! `netpeer send ADDR UP DOWN`: the client side. It returns only after the server's close, so
//! that every packet of the connection has passed while it ran, and prints what the kernel
//! says it moved (TCP_INFO): `bytes_sent=N segs_out=M bytes_retrans=R bytes_received=N
//! segs_in=M` (payload bytes with retransmissions, segments, retransmitted bytes; payload
//! bytes received in order, segments).
use std::{
    io::{Read, Write},
    net::{Shutdown, TcpListener, TcpStream},
    os::fd::AsRawFd,
};

fn drain(s: &mut TcpStream, mut n: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    while n > 0 {
        let want = n.min(buf.len() as u64) as usize;
        let got = s.read(&mut buf[..want])?;
        if got == 0 {
            return Err(std::io::Error::other("connection closed early"));
        }
        n -= got as u64;
    }
    Ok(())
}

fn fill(s: &mut TcpStream, mut n: u64) -> std::io::Result<()> {
    let buf = vec![0x5au8; 64 * 1024];
    while n > 0 {
        let k = n.min(buf.len() as u64) as usize;
        s.write_all(&buf[..k])?;
        n -= k as u64;
    }
    Ok(())
}

fn to_eof(s: &mut TcpStream) -> std::io::Result<()> {
    let mut b = [0u8; 512];
    while s.read(&mut b)? > 0 {}
    Ok(())
}

fn serve(addr: &str) -> std::io::Result<()> {
    let l = TcpListener::bind(addr)?;
    println!("ready");
    std::io::stdout().flush()?;
    for s in l.incoming() {
        let mut s = s?;
        let mut h = [0u8; 16];
        if s.read_exact(&mut h).is_err() {
            continue;
        }
        let up = u64::from_le_bytes(h[..8].try_into().unwrap());
        let down = u64::from_le_bytes(h[8..].try_into().unwrap());
        let done = drain(&mut s, up)
            .and_then(|_| fill(&mut s, down))
            .and_then(|_| to_eof(&mut s))
            .and_then(|_| sent(&s));
        // Before the close, so that a client that waits for it finds the line written. The
        // reader may be gone: then nobody wants it.
        if let Ok(line) = done {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{line}").and_then(|_| out.flush());
        }
    }
    Ok(())
}

/// What the kernel says this socket sent (TCP_INFO), as the line both sides print.
fn sent(s: &TcpStream) -> std::io::Result<String> {
    // SAFETY: tcp_info is plain data; the kernel fills at most `len` bytes of it.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a socket this process owns; `info` is writable for `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut libc::tcp_info as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(format!(
        "bytes_sent={} segs_out={} bytes_retrans={} bytes_received={} segs_in={}",
        info.tcpi_bytes_sent,
        info.tcpi_segs_out,
        info.tcpi_bytes_retrans,
        info.tcpi_bytes_received,
        info.tcpi_segs_in
    ))
}

fn send(addr: &str, up: u64, down: u64) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&up.to_le_bytes());
    h[8..].copy_from_slice(&down.to_le_bytes());
    s.write_all(&h)?;
    fill(&mut s, up)?;
    drain(&mut s, down)?;
    s.shutdown(Shutdown::Write)?;
    to_eof(&mut s)?;
    println!("{}", sent(&s)?);
    Ok(())
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n = |i: usize| a.get(i).and_then(|v| v.parse::<u64>().ok());
    let r = match (a.get(1).map(String::as_str), a.get(2)) {
        (Some("serve"), Some(addr)) => serve(addr),
        (Some("send"), Some(addr)) => match (n(3), n(4)) {
            (Some(up), Some(down)) => send(addr, up, down),
            _ => Err(std::io::Error::other("usage: netpeer send ADDR UP DOWN")),
        },
        _ => Err(std::io::Error::other(
            "usage: netpeer serve ADDR | netpeer send ADDR UP DOWN",
        )),
    };
    if let Err(e) = r {
        eprintln!("netpeer: {e}");
        std::process::exit(1);
    }
}
