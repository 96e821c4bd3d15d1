//! Classic libpcap capture files: a writer for the model's wire taps and a small reader for tests
//! and tools.
//!
//! The classic format is a 24-byte file header followed by one 16-byte record header plus the
//! captured bytes per frame. We write it in little-endian byte order with microsecond timestamps
//! (magic `0xa1b2c3d4`, version 2.4, link type 1 = Ethernet), which every pcap reader accepts,
//! including Wireshark/tshark and tcpdump. The reader also accepts the big-endian and
//! nanosecond-resolution variants so files from other tools can be read back.
//!
//! pcapng is not supported: the classic format is all a wire capture needs, and it is simple
//! enough to be written without allocation per frame.

use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Magic number of a classic pcap file with microsecond timestamps, as read in the writer's byte
/// order.
pub const PCAP_MAGIC: u32 = 0xa1b2_c3d4;

/// Magic number of a classic pcap file with nanosecond timestamps (read back, never written).
pub const PCAP_MAGIC_NANOS: u32 = 0xa1b2_3c4d;

/// Format major version written in the file header.
pub const PCAP_VERSION_MAJOR: u16 = 2;

/// Format minor version written in the file header.
pub const PCAP_VERSION_MINOR: u16 = 4;

/// Link type for Ethernet II frames without a frame check sequence (`LINKTYPE_ETHERNET`).
pub const LINKTYPE_ETHERNET: u32 = 1;

/// Snapshot length used when none is given, in bytes per frame; larger than any frame the model's
/// wires carry, so nothing is truncated by default.
pub const DEFAULT_SNAPLEN: u32 = 65_535;

/// Largest snapshot length accepted by the writer and largest record accepted by the reader, in
/// bytes. This is libpcap's own upper bound; a record claiming more is corrupt, and refusing it
/// keeps a garbage length from turning into a huge allocation.
pub const MAX_SNAPLEN: u32 = 262_144;

/// Size of the file header, in bytes.
pub const FILE_HEADER_LEN: usize = 24;

/// Size of each per-frame record header, in bytes.
pub const RECORD_HEADER_LEN: usize = 16;

/// Errors from writing or reading a pcap file.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The underlying file or stream failed; `path` is set when the writer or reader was opened
    /// from a file name.
    #[error("pcap I/O on {} failed: {source}", Location(path.as_deref()))]
    Io {
        /// The file involved, when known.
        path: Option<PathBuf>,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A snapshot length outside `1..=MAX_SNAPLEN` was requested.
    #[error("pcap snapshot length {snaplen} is out of range: use 1..={MAX_SNAPLEN} bytes")]
    InvalidSnaplen {
        /// The rejected length, in bytes.
        snaplen: u32,
    },
    /// A timestamp does not fit the format's 32-bit seconds field (after the year 2106).
    #[error(
        "pcap timestamp {timestamp:?} does not fit in 32-bit seconds; pass a time since the \
         UNIX epoch or since the capture started"
    )]
    TimestampOutOfRange {
        /// The rejected timestamp.
        timestamp: Duration,
    },
    /// A frame is longer than the format's 32-bit original-length field can express.
    #[error(
        "frame of {len} bytes is too long for a pcap record (at most {} bytes)",
        u32::MAX
    )]
    FrameTooLong {
        /// The frame's length, in bytes.
        len: usize,
    },
    /// The input is not a well-formed classic pcap file.
    #[error("malformed pcap {} at byte offset {offset}: {kind}", Location(path.as_deref()))]
    Format {
        /// The file involved, when known.
        path: Option<PathBuf>,
        /// Byte offset from the start of the input where the bad structure begins.
        offset: u64,
        /// What is wrong.
        kind: FormatError,
    },
}

/// What is wrong with a malformed pcap input (inside [`PcapError::Format`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The first four bytes are not a classic pcap magic number in either byte order.
    #[error(
        "bad magic {found:#010x} (expected {PCAP_MAGIC:#010x} or {PCAP_MAGIC_NANOS:#010x} in \
         either byte order; pcapng files are not supported)"
    )]
    BadMagic {
        /// The magic read, as a little-endian number.
        found: u32,
    },
    /// The file header carries a major version other than 2.
    #[error("unsupported pcap version {major}.{minor} (only 2.x is understood)")]
    UnsupportedVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
    /// The input ends inside a header or a record's data.
    #[error("truncated {what}: needed {needed} bytes, only {got} present")]
    Truncated {
        /// Which structure was cut short: `"file header"`, `"record header"` or `"record data"`.
        what: &'static str,
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes that were present before the end of the input.
        got: usize,
    },
    /// A record claims more captured bytes than any pcap file may hold.
    #[error(
        "record {index} claims {incl_len} captured bytes, more than the {MAX_SNAPLEN}-byte limit"
    )]
    RecordTooLong {
        /// Zero-based record number.
        index: u64,
        /// Captured length claimed, in bytes.
        incl_len: u32,
    },
    /// A record claims to have captured more bytes than the frame had.
    #[error("record {index} captured {incl_len} bytes of a {orig_len}-byte frame")]
    CapturedExceedsOriginal {
        /// Zero-based record number.
        index: u64,
        /// Captured length claimed, in bytes.
        incl_len: u32,
        /// Original frame length claimed, in bytes.
        orig_len: u32,
    },
}

/// Formats an optional path for error messages; streams have no name, so say so.
struct Location<'a>(Option<&'a Path>);

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(path) => write!(f, "`{}`", path.display()),
            None => f.write_str("stream"),
        }
    }
}

/// Writes frames to a classic pcap stream.
///
/// The file header is written when the writer is created, so even a capture with no frames is a
/// valid file. Output is only as durable as the underlying writer: call [`PcapWriter::flush`] (or
/// [`PcapWriter::into_inner`]) before relying on the file, because a buffered writer dropped
/// without a flush cannot report a failed final write.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    inner: W,
    snaplen: u32,
    path: Option<PathBuf>,
    frames: u64,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the file header, with the default
    /// snapshot length of [`DEFAULT_SNAPLEN`] bytes. Writes are buffered.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        Self::create_with_snaplen(path, DEFAULT_SNAPLEN)
    }

    /// Like [`PcapWriter::create`] with a snapshot length of `snaplen` bytes
    /// (`1..=MAX_SNAPLEN`); longer frames are truncated to it.
    pub fn create_with_snaplen(path: impl AsRef<Path>, snaplen: u32) -> Result<Self, PcapError> {
        let path = path.as_ref();
        // Validate before touching the file system so a bad argument leaves no empty file behind.
        check_snaplen(snaplen)?;
        let file = File::create(path).map_err(|source| PcapError::Io {
            path: Some(path.to_path_buf()),
            source,
        })?;
        let mut writer =
            Self::with_snaplen(BufWriter::new(file), snaplen).map_err(|e| match e {
                PcapError::Io { source, .. } => PcapError::Io {
                    path: Some(path.to_path_buf()),
                    source,
                },
                other => other,
            })?;
        writer.path = Some(path.to_path_buf());
        Ok(writer)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Wraps `inner` and writes the file header, with the default snapshot length of
    /// [`DEFAULT_SNAPLEN`] bytes. `inner` is written as is: wrap it in a `BufWriter` if it is
    /// unbuffered.
    pub fn new(inner: W) -> Result<Self, PcapError> {
        Self::with_snaplen(inner, DEFAULT_SNAPLEN)
    }

    /// Wraps `inner` and writes the file header, with a snapshot length of `snaplen` bytes
    /// (`1..=MAX_SNAPLEN`); longer frames are truncated to it.
    pub fn with_snaplen(mut inner: W, snaplen: u32) -> Result<Self, PcapError> {
        check_snaplen(snaplen)?;
        let mut header = [0u8; FILE_HEADER_LEN];
        header[0..4].copy_from_slice(&PCAP_MAGIC.to_le_bytes());
        header[4..6].copy_from_slice(&PCAP_VERSION_MAJOR.to_le_bytes());
        header[6..8].copy_from_slice(&PCAP_VERSION_MINOR.to_le_bytes());
        // Bytes 8..16 (thiszone, sigfigs) stay zero: timestamps are UTC and accuracy unknown, as
        // every modern writer records them.
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        inner
            .write_all(&header)
            .map_err(|source| PcapError::Io { path: None, source })?;
        Ok(Self {
            inner,
            snaplen,
            path: None,
            frames: 0,
        })
    }

    /// Appends one Ethernet frame (destination MAC first, no FCS).
    ///
    /// `timestamp` is the capture time as a duration since the UNIX epoch; readers display it as
    /// a date. A duration since the start of the capture is also accepted (it shows as a date in
    /// January 1970), which is handy for deterministic files. Resolution is one microsecond;
    /// finer parts are dropped. It must be below 2^32 seconds.
    ///
    /// A frame longer than the snapshot length is stored truncated, with its full length kept as
    /// the record's original length.
    ///
    /// After an I/O error the output may end in a partial record; stop writing to it.
    pub fn write_frame(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), PcapError> {
        let ts_sec = u32::try_from(timestamp.as_secs())
            .map_err(|_| PcapError::TimestampOutOfRange { timestamp })?;
        let ts_usec = timestamp.subsec_micros();
        let orig_len =
            u32::try_from(frame.len()).map_err(|_| PcapError::FrameTooLong { len: frame.len() })?;
        let incl_len = orig_len.min(self.snaplen);
        // `incl_len` is at most `frame.len()`, so this never slices past the end; `get` keeps the
        // no-panic promise without relying on that reasoning.
        let captured = frame.get(..incl_len as usize).unwrap_or(frame);

        let mut record = [0u8; RECORD_HEADER_LEN];
        record[0..4].copy_from_slice(&ts_sec.to_le_bytes());
        record[4..8].copy_from_slice(&ts_usec.to_le_bytes());
        record[8..12].copy_from_slice(&incl_len.to_le_bytes());
        record[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.inner
            .write_all(&record)
            .and_then(|()| self.inner.write_all(captured))
            .map_err(|source| self.io_error(source))?;
        self.frames += 1;
        Ok(())
    }

    /// Flushes buffered records to the underlying writer.
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.inner.flush().map_err(|source| self.io_error(source))
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> Result<W, PcapError> {
        self.flush()?;
        Ok(self.inner)
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// The snapshot length, in bytes: the most bytes stored per frame.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Number of frames written so far.
    pub fn frames_written(&self) -> u64 {
        self.frames
    }

    /// The file this writer was created on, if it was created from a path.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn io_error(&self, source: io::Error) -> PcapError {
        PcapError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

fn check_snaplen(snaplen: u32) -> Result<(), PcapError> {
    if snaplen == 0 || snaplen > MAX_SNAPLEN {
        return Err(PcapError::InvalidSnaplen { snaplen });
    }
    Ok(())
}

/// The fields of a pcap file header, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapHeader {
    /// Format major version (always 2 for files the reader accepts).
    pub version_major: u16,
    /// Format minor version (4 in every file written since 1998).
    pub version_minor: u16,
    /// Offset of the timestamps' time zone from UTC, in seconds (0 in practice).
    pub thiszone: i32,
    /// Claimed timestamp accuracy (0 in practice).
    pub sigfigs: u32,
    /// Snapshot length: the most bytes captured per frame.
    pub snaplen: u32,
    /// Link-layer type of every record ([`LINKTYPE_ETHERNET`] for our files).
    pub linktype: u32,
    /// Whether the file's timestamps have nanosecond (rather than microsecond) resolution.
    pub nanosecond: bool,
    /// Whether the file was written in big-endian byte order.
    pub big_endian: bool,
}

/// The header of one record, without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Capture time, as stored (since the UNIX epoch for files from live captures).
    pub timestamp: Duration,
    /// Bytes captured and stored in the file (at most the snapshot length).
    pub incl_len: u32,
    /// Length of the frame on the wire, in bytes.
    pub orig_len: u32,
}

/// One record read back: header fields and captured bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapRecord {
    /// Capture time, as stored.
    pub timestamp: Duration,
    /// Length of the frame on the wire, in bytes; more than `data.len()` when truncated.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Reads a classic pcap stream: the file header on construction, then one record at a time.
///
/// Every length in the input is checked before it is used; malformed or truncated input yields a
/// [`PcapError::Format`], never a panic. After any error the reader is finished and yields no
/// more records.
#[derive(Debug)]
pub struct PcapReader<R: Read> {
    inner: R,
    header: PcapHeader,
    path: Option<PathBuf>,
    offset: u64,
    index: u64,
    finished: bool,
}

impl PcapReader<BufReader<File>> {
    /// Opens the file at `path` and reads its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| PcapError::Io {
            path: Some(path.to_path_buf()),
            source,
        })?;
        Self::with_path(BufReader::new(file), Some(path.to_path_buf()))
    }
}

impl<R: Read> PcapReader<R> {
    /// Reads the file header from `inner`.
    pub fn new(inner: R) -> Result<Self, PcapError> {
        Self::with_path(inner, None)
    }

    fn with_path(mut inner: R, path: Option<PathBuf>) -> Result<Self, PcapError> {
        let mut raw = [0u8; FILE_HEADER_LEN];
        let got = read_full(&mut inner, &mut raw).map_err(|source| PcapError::Io {
            path: path.clone(),
            source,
        })?;
        let format = |kind| PcapError::Format {
            path: path.clone(),
            offset: 0,
            kind,
        };
        // The magic decides the byte order, so it is checked before the length: four bytes of
        // garbage should say "not pcap" rather than "truncated".
        if got >= 4 {
            let found = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
            magic_kind(found).ok_or_else(|| format(FormatError::BadMagic { found }))?;
        }
        if got < FILE_HEADER_LEN {
            return Err(format(FormatError::Truncated {
                what: "file header",
                needed: FILE_HEADER_LEN,
                got,
            }));
        }
        let found = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
        let (big_endian, nanosecond) =
            magic_kind(found).ok_or_else(|| format(FormatError::BadMagic { found }))?;
        let u16_at = |at: usize| {
            let b = [raw[at], raw[at + 1]];
            if big_endian {
                u16::from_be_bytes(b)
            } else {
                u16::from_le_bytes(b)
            }
        };
        let u32_at = |at: usize| read_u32(&raw, at, big_endian);
        let header = PcapHeader {
            version_major: u16_at(4),
            version_minor: u16_at(6),
            // Reinterpreting the bits is the point: the field is a signed 32-bit offset.
            thiszone: u32_at(8) as i32,
            sigfigs: u32_at(12),
            snaplen: u32_at(16),
            linktype: u32_at(20),
            nanosecond,
            big_endian,
        };
        if header.version_major != PCAP_VERSION_MAJOR {
            return Err(format(FormatError::UnsupportedVersion {
                major: header.version_major,
                minor: header.version_minor,
            }));
        }
        Ok(Self {
            inner,
            header,
            path,
            offset: FILE_HEADER_LEN as u64,
            index: 0,
            finished: false,
        })
    }

    /// The file header.
    pub fn header(&self) -> &PcapHeader {
        &self.header
    }

    /// Number of records read so far.
    pub fn records_read(&self) -> u64 {
        self.index
    }

    /// Reads the next record's captured bytes into `data` (replacing its contents, reusing its
    /// allocation) and returns its header; `Ok(None)` at a clean end of input.
    pub fn read_record_into(
        &mut self,
        data: &mut Vec<u8>,
    ) -> Result<Option<RecordHeader>, PcapError> {
        if self.finished {
            return Ok(None);
        }
        let result = self.read_record_inner(data);
        if !matches!(result, Ok(Some(_))) {
            self.finished = true;
        }
        result
    }

    /// Reads the next record; `Ok(None)` at a clean end of input.
    pub fn next_record(&mut self) -> Result<Option<PcapRecord>, PcapError> {
        let mut data = Vec::new();
        Ok(self.read_record_into(&mut data)?.map(|header| PcapRecord {
            timestamp: header.timestamp,
            orig_len: header.orig_len,
            data,
        }))
    }

    fn read_record_inner(&mut self, data: &mut Vec<u8>) -> Result<Option<RecordHeader>, PcapError> {
        let record_offset = self.offset;
        let mut raw = [0u8; RECORD_HEADER_LEN];
        let got = read_full(&mut self.inner, &mut raw).map_err(|source| self.io_error(source))?;
        if got == 0 {
            return Ok(None);
        }
        if got < RECORD_HEADER_LEN {
            return Err(self.format_error(
                record_offset,
                FormatError::Truncated {
                    what: "record header",
                    needed: RECORD_HEADER_LEN,
                    got,
                },
            ));
        }
        let big_endian = self.header.big_endian;
        let ts_sec = read_u32(&raw, 0, big_endian);
        let ts_frac = read_u32(&raw, 4, big_endian);
        let incl_len = read_u32(&raw, 8, big_endian);
        let orig_len = read_u32(&raw, 12, big_endian);
        let index = self.index;
        if incl_len > MAX_SNAPLEN {
            return Err(self.format_error(
                record_offset,
                FormatError::RecordTooLong { index, incl_len },
            ));
        }
        if incl_len > orig_len {
            return Err(self.format_error(
                record_offset,
                FormatError::CapturedExceedsOriginal {
                    index,
                    incl_len,
                    orig_len,
                },
            ));
        }
        // A fraction field at or past one second is out of spec; carrying it into the seconds is
        // what other readers do, and the sum cannot overflow a u64 of seconds.
        let fraction = if self.header.nanosecond {
            Duration::from_nanos(u64::from(ts_frac))
        } else {
            Duration::from_micros(u64::from(ts_frac))
        };
        let timestamp = Duration::from_secs(u64::from(ts_sec)).saturating_add(fraction);

        self.offset += RECORD_HEADER_LEN as u64;
        let data_offset = self.offset;
        // Bounded by MAX_SNAPLEN above, so a garbage length cannot ask for a huge buffer.
        data.clear();
        data.resize(incl_len as usize, 0);
        let got = read_full(&mut self.inner, data).map_err(|source| self.io_error(source))?;
        if got < data.len() {
            let needed = data.len();
            data.truncate(got);
            return Err(self.format_error(
                data_offset,
                FormatError::Truncated {
                    what: "record data",
                    needed,
                    got,
                },
            ));
        }
        self.offset += u64::from(incl_len);
        self.index += 1;
        Ok(Some(RecordHeader {
            timestamp,
            incl_len,
            orig_len,
        }))
    }

    fn io_error(&self, source: io::Error) -> PcapError {
        PcapError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn format_error(&self, offset: u64, kind: FormatError) -> PcapError {
        PcapError::Format {
            path: self.path.clone(),
            offset,
            kind,
        }
    }
}

impl<R: Read> Iterator for PcapReader<R> {
    type Item = Result<PcapRecord, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Returns `(big_endian, nanosecond)` for a magic read as little-endian, or `None` if it is not a
/// classic pcap magic.
fn magic_kind(found: u32) -> Option<(bool, bool)> {
    match found {
        PCAP_MAGIC => Some((false, false)),
        PCAP_MAGIC_NANOS => Some((false, true)),
        m if m == PCAP_MAGIC.swap_bytes() => Some((true, false)),
        m if m == PCAP_MAGIC_NANOS.swap_bytes() => Some((true, true)),
        _ => None,
    }
}

fn read_u32(raw: &[u8], at: usize, big_endian: bool) -> u32 {
    let mut b = [0u8; 4];
    if let Some(src) = raw.get(at..at + 4) {
        b.copy_from_slice(src);
    }
    if big_endian {
        u32::from_be_bytes(b)
    } else {
        u32::from_le_bytes(b)
    }
}

/// Reads until `buf` is full or the input ends, returning the bytes read; unlike `read_exact` it
/// says how much was there, which the truncation errors report.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let Some(rest) = buf.get_mut(filled..) else {
            break;
        };
        match reader.read(rest) {
            Ok(0) => break,
            // A misbehaving reader may claim more than it was given; never count past the end.
            Ok(n) => filled = filled.saturating_add(n).min(buf.len()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
