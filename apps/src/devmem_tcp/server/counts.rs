//! What the receiving side counts, and how it writes a MAC address.

/// What the receiving side counted.
#[derive(Debug, Clone, Default)]
pub struct ServerCounts {
    /// Stream bytes delivered in order (fragments and linear bytes).
    pub bytes: u64,
    /// Of them, bytes in host memory (the header buffer's tail).
    pub linear_bytes: u64,
    /// Of them, bytes in dmabuf fragments.
    pub fragment_bytes: u64,
    /// Frames taken (from the split queue, and the handshake's plain queue).
    pub segments: u64,
    /// Segments whose payload had all been received before (the peer retransmitted).
    pub duplicates: u64,
    /// Segments kept out of order.
    pub out_of_order: u64,
    /// Frames the parser refused (not TCP, headers past the split, lengths wrong).
    pub unparsed: u64,
    /// Segments of another peer than the connection's.
    pub foreign: u64,
    /// Segments that reached the handshake's plain queue with more payload than the receiver
    /// takes in host memory: payload dropped, headers taken (the peer sends it again).
    pub plain_dropped: u64,
    /// Replies (SYN-ACK, ACK, FIN) sent.
    pub replies: u64,
    /// Replies the send ring could not take (dropped; ACKs are cumulative).
    pub replies_dropped: u64,
    /// Dmabuf bytes the CPU read to check the pattern (not delivery).
    pub validation_read_bytes: u64,
    /// Dmabuf payload bytes the CPU copied to deliver them: always 0, fragments are handed
    /// out as (offset, length, token).
    pub cpu_payload_copied: u64,
    /// Frames taken in turns that took any (split and plain queues).
    pub turn_frames: u64,
    /// Nanoseconds those turns took: the queues' polls, the parse, the TCP receiver, tokens
    /// back, the replies sent (and the pattern check when one is asked for).
    pub turn_ns: u64,
    /// Frames taken from the split queue.
    pub split_frames: u64,
    /// Nanoseconds spent on them in the receiver: the parse, the TCP receiver, the pattern
    /// check when one is asked for, and their tokens back (the split queue's poll and the
    /// transmission of replies not counted).
    pub receiver_ns: u64,
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}
