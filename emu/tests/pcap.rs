//! Tests of the pcap writer and reader, including cross-checks against independent readers of
//! the format: the `pcap-parser` crate (every machine) and tshark (where it is installed).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cxdirect_emu::pcap::{
    FormatError, PcapError, PcapReader, PcapRecord, PcapWriter, DEFAULT_SNAPLEN, FILE_HEADER_LEN,
    LINKTYPE_ETHERNET, MAX_SNAPLEN, PCAP_MAGIC, RECORD_HEADER_LEN,
};

/// An Ethernet frame of `len` bytes (at least 14) whose bytes identify `seed`, so mix-ups show.
fn frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    // 0x88b5: the IEEE's local experimental EtherType, so dissectors leave the payload alone.
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    for (i, b) in f.iter_mut().enumerate().skip(14) {
        *b = seed.wrapping_add(i as u8);
    }
    f
}

fn write_capture(frames: &[(Duration, Vec<u8>)], snaplen: u32) -> Vec<u8> {
    let mut w = PcapWriter::with_snaplen(Vec::new(), snaplen).expect("header");
    for (ts, f) in frames {
        w.write_frame(*ts, f).expect("write frame");
    }
    assert_eq!(w.frames_written(), frames.len() as u64);
    w.into_inner().expect("flush")
}

fn read_all(bytes: &[u8]) -> Result<Vec<PcapRecord>, PcapError> {
    PcapReader::new(bytes)?.collect()
}

fn format_kind(err: PcapError) -> FormatError {
    match err {
        PcapError::Format { kind, .. } => kind,
        other => panic!("expected a format error, got {other:?}"),
    }
}

/// A temporary file name no other test or process uses.
fn temp_path(tag: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "cxdirect-emu-{tag}-{}-{nanos}-{}.pcap",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Removes the file when the test ends, pass or fail.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn file_header_bytes_are_classic_little_endian() {
    let bytes = write_capture(&[], DEFAULT_SNAPLEN);
    assert_eq!(bytes.len(), FILE_HEADER_LEN);
    let mut expected = Vec::new();
    expected.extend_from_slice(&[0xd4, 0xc3, 0xb2, 0xa1]); // magic 0xa1b2c3d4, little-endian
    expected.extend_from_slice(&[2, 0, 4, 0]); // version 2.4
    expected.extend_from_slice(&[0; 8]); // thiszone, sigfigs
    expected.extend_from_slice(&65_535u32.to_le_bytes());
    expected.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    assert_eq!(bytes, expected);
}

#[test]
fn record_header_bytes() {
    let f = frame(60, 7);
    let bytes = write_capture(
        &[(Duration::new(0x0102_0304, 5_000_999), f.clone())],
        65_535,
    );
    let rec = &bytes[FILE_HEADER_LEN..];
    assert_eq!(&rec[0..4], &0x0102_0304u32.to_le_bytes());
    // 5_000_999 ns is 5000 µs; the sub-microsecond part is dropped.
    assert_eq!(&rec[4..8], &5000u32.to_le_bytes());
    assert_eq!(&rec[8..12], &60u32.to_le_bytes());
    assert_eq!(&rec[12..16], &60u32.to_le_bytes());
    assert_eq!(&rec[RECORD_HEADER_LEN..], &f[..]);
}

#[test]
fn frames_read_back_identical() {
    let frames: Vec<(Duration, Vec<u8>)> = (0..50u32)
        .map(|i| {
            let len = 14 + (i as usize * 97) % 1500;
            (
                Duration::new(1_700_000_000 + u64::from(i), i * 1000),
                frame(len, i as u8),
            )
        })
        .collect();
    let bytes = write_capture(&frames, DEFAULT_SNAPLEN);

    let mut reader = PcapReader::new(&bytes[..]).expect("header");
    let h = *reader.header();
    assert_eq!((h.version_major, h.version_minor), (2, 4));
    assert_eq!(h.snaplen, DEFAULT_SNAPLEN);
    assert_eq!(h.linktype, LINKTYPE_ETHERNET);
    assert!(!h.nanosecond && !h.big_endian);

    for (ts, f) in &frames {
        let rec = reader.next_record().expect("record").expect("not at end");
        assert_eq!(rec.timestamp, *ts);
        assert_eq!(rec.orig_len as usize, f.len());
        assert_eq!(&rec.data, f);
    }
    assert!(reader.next_record().expect("clean end").is_none());
    assert_eq!(reader.records_read(), frames.len() as u64);
}

#[test]
fn read_record_into_reuses_buffer() {
    let frames = vec![
        (Duration::ZERO, frame(100, 1)),
        (Duration::from_micros(1), frame(20, 2)),
    ];
    let bytes = write_capture(&frames, DEFAULT_SNAPLEN);
    let mut reader = PcapReader::new(&bytes[..]).expect("header");
    let mut buf = Vec::new();
    for (ts, f) in &frames {
        let h = reader
            .read_record_into(&mut buf)
            .expect("read")
            .expect("record");
        assert_eq!(h.timestamp, *ts);
        assert_eq!(h.incl_len as usize, f.len());
        assert_eq!(&buf, f);
    }
    assert!(reader.read_record_into(&mut buf).expect("end").is_none());
}

#[test]
fn snaplen_truncates_and_keeps_original_length() {
    let frames = vec![
        (Duration::ZERO, frame(200, 1)),
        (Duration::ZERO, frame(64, 2)),
        (Duration::ZERO, frame(65, 3)),
    ];
    let bytes = write_capture(&frames, 64);
    let records = read_all(&bytes).expect("read");
    assert_eq!(records.len(), 3);
    for (rec, (_, f)) in records.iter().zip(&frames) {
        assert_eq!(rec.orig_len as usize, f.len());
        assert_eq!(rec.data.len(), f.len().min(64));
        assert_eq!(&rec.data[..], &f[..rec.data.len()]);
    }
}

#[test]
fn bad_writer_arguments_are_errors() {
    for snaplen in [0, MAX_SNAPLEN + 1, u32::MAX] {
        let err = PcapWriter::with_snaplen(Vec::new(), snaplen).unwrap_err();
        assert!(
            matches!(err, PcapError::InvalidSnaplen { snaplen: s } if s == snaplen),
            "{err:?}"
        );
    }
    PcapWriter::with_snaplen(Vec::new(), MAX_SNAPLEN).expect("largest snaplen is valid");

    let mut w = PcapWriter::new(Vec::new()).expect("header");
    let too_late = Duration::from_secs(u64::from(u32::MAX) + 1);
    let err = w.write_frame(too_late, &frame(60, 0)).unwrap_err();
    assert!(
        matches!(err, PcapError::TimestampOutOfRange { .. }),
        "{err:?}"
    );
    // A refused frame leaves the stream as it was.
    assert_eq!(w.frames_written(), 0);
    assert_eq!(w.get_ref().len(), FILE_HEADER_LEN);
}

/// A writer that fails once `limit` bytes have been written.
#[derive(Debug)]
struct FailingWriter {
    written: usize,
    limit: usize,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written + buf.len() > self.limit {
            return Err(io::Error::other("disk full"));
        }
        self.written += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn io_errors_are_reported() {
    let err = PcapWriter::new(FailingWriter {
        written: 0,
        limit: 10,
    })
    .unwrap_err();
    assert!(matches!(err, PcapError::Io { path: None, .. }), "{err:?}");

    let mut w = PcapWriter::new(FailingWriter {
        written: 0,
        limit: FILE_HEADER_LEN + 20,
    })
    .expect("header fits");
    let err = w.write_frame(Duration::ZERO, &frame(60, 0)).unwrap_err();
    assert!(err.to_string().contains("disk full"), "{err}");
}

#[test]
fn create_and_open_a_file() {
    let path = temp_path("roundtrip");
    let _cleanup = TempFile(path.clone());
    let frames = [frame(60, 1), frame(1514, 2)];
    let mut w = PcapWriter::create(&path).expect("create");
    assert_eq!(w.path(), Some(path.as_path()));
    for f in &frames {
        w.write_frame(Duration::from_secs(1), f).expect("write");
    }
    w.flush().expect("flush");
    drop(w);

    let records: Vec<PcapRecord> = PcapReader::open(&path)
        .expect("open")
        .collect::<Result<_, _>>()
        .expect("read");
    let data: Vec<Vec<u8>> = records.into_iter().map(|r| r.data).collect();
    assert_eq!(data, frames);
}

#[test]
fn file_errors_carry_the_path() {
    let dir = temp_path("no-such-dir");
    let path = dir.join("capture.pcap");
    let err = PcapWriter::create(&path).unwrap_err();
    match &err {
        PcapError::Io { path: Some(p), .. } => assert_eq!(p, &path),
        other => panic!("expected an I/O error with the path, got {other:?}"),
    }
    assert!(err.to_string().contains("capture.pcap"), "{err}");

    let err = PcapReader::open(&path).unwrap_err();
    assert!(
        matches!(err, PcapError::Io { path: Some(_), .. }),
        "{err:?}"
    );

    // Format errors from a named file name it too.
    let bad = temp_path("garbage");
    let _cleanup = TempFile(bad.clone());
    std::fs::write(&bad, b"this is not a capture file at all").expect("write garbage");
    let err = PcapReader::open(&bad).unwrap_err();
    assert!(
        matches!(&err, PcapError::Format { path: Some(p), offset: 0, kind: FormatError::BadMagic { .. } } if p == &bad),
        "{err:?}"
    );
}

#[test]
fn bad_magic_is_an_error() {
    let err = PcapReader::new(&b"GIF89a plus enough bytes to fill a header"[..]).unwrap_err();
    assert!(matches!(format_kind(err), FormatError::BadMagic { found } if found == 0x3846_4947));

    // pcapng's section header block is refused with a hint in the message.
    let mut ng = vec![0x0a, 0x0d, 0x0d, 0x0a];
    ng.extend_from_slice(&[0; 28]);
    let err = PcapReader::new(&ng[..]).unwrap_err();
    assert!(err.to_string().contains("pcapng"), "{err}");
}

#[test]
fn truncated_input_is_an_error() {
    let err = PcapReader::new(&[][..]).unwrap_err();
    assert_eq!(
        format_kind(err),
        FormatError::Truncated {
            what: "file header",
            needed: FILE_HEADER_LEN,
            got: 0
        }
    );

    let full = write_capture(&[(Duration::ZERO, frame(100, 9))], DEFAULT_SNAPLEN);
    let err = PcapReader::new(&full[..10]).unwrap_err();
    assert_eq!(
        format_kind(err),
        FormatError::Truncated {
            what: "file header",
            needed: FILE_HEADER_LEN,
            got: 10
        }
    );

    // Cut inside the record header.
    let mut reader = PcapReader::new(&full[..FILE_HEADER_LEN + 5]).expect("header");
    match reader.next_record().unwrap_err() {
        PcapError::Format { offset, kind, .. } => {
            assert_eq!(offset, FILE_HEADER_LEN as u64);
            assert_eq!(
                kind,
                FormatError::Truncated {
                    what: "record header",
                    needed: RECORD_HEADER_LEN,
                    got: 5
                }
            );
        }
        other => panic!("{other:?}"),
    }
    // After an error the reader is finished.
    assert!(reader.next_record().expect("finished").is_none());
    assert!(reader.next().is_none());

    // Cut inside the record data.
    let cut = FILE_HEADER_LEN + RECORD_HEADER_LEN + 40;
    let err = read_all(&full[..cut]).unwrap_err();
    assert_eq!(
        format_kind(err),
        FormatError::Truncated {
            what: "record data",
            needed: 100,
            got: 40
        }
    );
}

#[test]
fn impossible_lengths_are_errors() {
    let mut bytes = write_capture(&[(Duration::ZERO, frame(100, 9))], DEFAULT_SNAPLEN);
    let incl = FILE_HEADER_LEN + 8;
    let orig = FILE_HEADER_LEN + 12;

    let mut huge = bytes.clone();
    huge[incl..incl + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    huge[orig..orig + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        format_kind(read_all(&huge).unwrap_err()),
        FormatError::RecordTooLong {
            index: 0,
            incl_len: u32::MAX
        }
    );

    bytes[orig..orig + 4].copy_from_slice(&50u32.to_le_bytes());
    assert_eq!(
        format_kind(read_all(&bytes).unwrap_err()),
        FormatError::CapturedExceedsOriginal {
            index: 0,
            incl_len: 100,
            orig_len: 50
        }
    );

    let mut v3 = write_capture(&[], DEFAULT_SNAPLEN);
    v3[4..6].copy_from_slice(&3u16.to_le_bytes());
    assert!(matches!(
        format_kind(PcapReader::new(&v3[..]).unwrap_err()),
        FormatError::UnsupportedVersion { major: 3, minor: 4 }
    ));
}

#[test]
fn big_endian_and_nanosecond_files_are_read() {
    let f = frame(60, 3);
    let mut be = Vec::new();
    be.extend_from_slice(&0xa1b2_3c4du32.to_be_bytes()); // nanosecond magic, big-endian
    be.extend_from_slice(&2u16.to_be_bytes());
    be.extend_from_slice(&4u16.to_be_bytes());
    be.extend_from_slice(&0i32.to_be_bytes());
    be.extend_from_slice(&0u32.to_be_bytes());
    be.extend_from_slice(&1500u32.to_be_bytes());
    be.extend_from_slice(&1u32.to_be_bytes());
    be.extend_from_slice(&7u32.to_be_bytes());
    be.extend_from_slice(&123_456_789u32.to_be_bytes());
    be.extend_from_slice(&60u32.to_be_bytes());
    be.extend_from_slice(&60u32.to_be_bytes());
    be.extend_from_slice(&f);

    let mut reader = PcapReader::new(&be[..]).expect("header");
    assert!(reader.header().big_endian && reader.header().nanosecond);
    assert_eq!(reader.header().snaplen, 1500);
    let rec = reader.next_record().expect("read").expect("record");
    assert_eq!(rec.timestamp, Duration::new(7, 123_456_789));
    assert_eq!(rec.data, f);
}

/// A small deterministic generator, so garbage inputs are the same on every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// Reads everything it can; the point is that it returns instead of panicking or hanging.
fn read_to_end_or_error(bytes: &[u8]) {
    if let Ok(reader) = PcapReader::new(bytes) {
        // Every record consumes at least its 16-byte header, so this bounds the loop.
        let max_records = bytes.len() / RECORD_HEADER_LEN + 1;
        let count = reader.take(max_records + 1).count();
        assert!(count <= max_records);
    }
}

#[test]
fn garbage_never_panics() {
    let valid = write_capture(
        &(0..8u8)
            .map(|i| {
                (
                    Duration::from_millis(u64::from(i)),
                    frame(14 + usize::from(i) * 30, i),
                )
            })
            .collect::<Vec<_>>(),
        DEFAULT_SNAPLEN,
    );
    // Every prefix of a valid file.
    for cut in 0..valid.len() {
        read_to_end_or_error(&valid[..cut]);
    }

    let mut rng = Lcg(0x5eed);
    for _ in 0..2000 {
        // Valid header with random bytes after it, or random bytes everywhere.
        let len = (rng.next() % 512) as usize;
        let mut bytes: Vec<u8> = if rng.next() % 2 == 0 {
            valid[..FILE_HEADER_LEN].to_vec()
        } else {
            Vec::new()
        };
        bytes.extend((0..len).map(|_| rng.next() as u8));
        read_to_end_or_error(&bytes);

        // A valid file with a few bytes flipped.
        let mut flipped = valid.clone();
        for _ in 0..4 {
            let at = (rng.next() as usize) % flipped.len();
            flipped[at] ^= (rng.next() as u8) | 1;
        }
        read_to_end_or_error(&flipped);
    }
}

#[test]
fn magic_constant_matches_the_file() {
    let bytes = write_capture(&[], DEFAULT_SNAPLEN);
    assert_eq!(
        u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")),
        PCAP_MAGIC
    );
}

/// Runs `tshark` on `path` and returns the `frame.len` and `frame.cap_len` of each frame.
fn tshark_lengths(path: &std::path::Path) -> Vec<(usize, usize)> {
    let output = match Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-e", "frame.len", "-e", "frame.cap_len"])
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
            "tshark is not installed, and this test needs it to check our pcap files with an \
             independent reader: install it with `apt-get install -y tshark` (CI does so in \
             .ci/run)"
        ),
        Err(e) => panic!("could not run tshark: {e}"),
    };
    assert!(
        output.status.success(),
        "tshark failed on {}: {}\n{}",
        path.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("tshark prints UTF-8");
    stdout
        .lines()
        .map(|line| {
            let mut fields = line.split('\t').map(|f| {
                f.trim()
                    .parse::<usize>()
                    .unwrap_or_else(|e| panic!("bad tshark line {line:?}: {e}"))
            });
            let len = fields.next().expect("frame.len");
            let cap = fields.next().expect("frame.cap_len");
            (len, cap)
        })
        .collect()
}

/// Capture files of the same frames under different snapshot lengths.
struct Written {
    /// Each file with its snapshot length.
    files: Vec<(u32, TempFile)>,
    /// The frames written to each, with their timestamps.
    frames: Vec<(Duration, Vec<u8>)>,
}

/// Writes one capture file per snapshot length (the default, and 100 bytes) of frames of sizes
/// from the smallest Ethernet header to a 16 KiB jumbo frame, 10 µs apart.
fn write_sized_captures(tag: &str) -> Written {
    let sizes = [14usize, 60, 64, 128, 1514, 1518, 9000, 9018, 16_406];
    let start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    let frames: Vec<(Duration, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            (
                start + Duration::from_micros(i as u64 * 10),
                frame(len, i as u8),
            )
        })
        .collect();
    let files = [DEFAULT_SNAPLEN, 100]
        .into_iter()
        .map(|snap| {
            let path = temp_path(&format!("{tag}-{snap}"));
            let file = TempFile(path.clone());
            let mut w = PcapWriter::create_with_snaplen(&path, snap).expect("create");
            for (ts, f) in &frames {
                w.write_frame(*ts, f).expect("write");
            }
            w.flush().expect("flush");
            (snap, file)
        })
        .collect();
    Written { files, frames }
}

#[test]
fn an_independent_reader_reads_our_files() {
    let written = write_sized_captures("independent");
    for (snap, file) in &written.files {
        let bytes = std::fs::read(&file.0).expect("read back");
        let capture = pcap_parser::PcapCapture::from_file(&bytes)
            .unwrap_or_else(|e| panic!("snaplen {snap}: not a pcap file to pcap-parser: {e:?}"));
        let header = &capture.header;
        assert_eq!((header.version_major, header.version_minor), (2, 4));
        assert_eq!(header.snaplen, *snap);
        assert_eq!(header.network, pcap_parser::Linktype::ETHERNET);
        assert!(!header.is_nanosecond_precision() && !header.is_bigendian());
        assert_eq!(
            capture.blocks.len(),
            written.frames.len(),
            "snaplen {snap}: frame count"
        );
        let mut previous = Duration::ZERO;
        for (i, (block, (ts, f))) in capture.blocks.iter().zip(&written.frames).enumerate() {
            let kept = f.len().min(*snap as usize);
            assert_eq!(block.origlen as usize, f.len(), "snaplen {snap}, frame {i}");
            assert_eq!(block.caplen as usize, kept, "snaplen {snap}, frame {i}");
            assert_eq!(block.data, &f[..kept], "snaplen {snap}, frame {i} bytes");
            let at = Duration::new(u64::from(block.ts_sec), block.ts_usec * 1000);
            // Records keep whole microseconds.
            assert_eq!(
                at.as_micros(),
                ts.as_micros(),
                "snaplen {snap}, frame {i} time"
            );
            assert!(
                at > previous,
                "snaplen {snap}, frame {i}: timestamps go forward"
            );
            previous = at;
            let eth = etherparse::Ethernet2HeaderSlice::from_slice(block.data)
                .unwrap_or_else(|e| panic!("snaplen {snap}, frame {i}: {e:?}"));
            assert_eq!(eth.destination(), [0x02, 0, 0, 0, 0, 0x02]);
            assert_eq!(eth.source(), [0x02, 0, 0, 0, 0, 0x01]);
            assert_eq!(eth.ether_type(), etherparse::EtherType(0x88b5));
        }
    }
}

#[test]
#[cfg_attr(
    not(has_tshark),
    ignore = "needs tshark on PATH: apt-get install tshark"
)]
fn tshark_reads_our_files() {
    let written = write_sized_captures("tshark");
    for (snap, file) in &written.files {
        // tshark must see the original lengths and, under a small snapshot length, the cut
        // captures.
        let seen = tshark_lengths(&file.0);
        assert_eq!(
            seen.len(),
            written.frames.len(),
            "frame count seen by tshark"
        );
        for (&(len, cap), (_, f)) in seen.iter().zip(&written.frames) {
            assert_eq!((len, cap), (f.len(), f.len().min(*snap as usize)));
        }
    }
}
