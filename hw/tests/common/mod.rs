//! Shared checks for layout tests.
//!
//! `check_offsets::<T>()` compares every row of a layout's field table with the offsets and widths
//! computed from the reference headers (`tests/ifc/*.txt`, see `hw/tools/ifc_offsets.py`), and
//! `round_trip::<T>()` writes a distinct value into every field through its named setter, reads
//! them all back through the named getters and checks each value's bits where the manual puts
//! them in the raw big-endian bytes.

#![allow(dead_code)]

use cxdirect_hw::{FieldKind, Layout};
use std::collections::HashMap;
use std::sync::OnceLock;

/// `(struct, field) -> (bit offset, width)` from every reference table.
fn reference() -> &'static HashMap<(String, String), (usize, usize)> {
    static TABLE: OnceLock<HashMap<(String, String), (usize, usize)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = HashMap::new();
        // One file per group of layouts; rows are `STRUCT FIELD BIT_OFFSET WIDTH` in hex bits.
        // hca, queues and steering come from Linux mlx5_ifc.h through hw/tools/ifc_offsets.py;
        // rdma comes from a newer mlx5_ifc.h (6.12) by the same tool;
        // device holds the byte layouts of device.h / mlx5dv.h structures, converted to bits.
        for text in [
            include_str!("../ifc/hca.txt"),
            include_str!("../ifc/queues.txt"),
            include_str!("../ifc/steering.txt"),
            include_str!("../ifc/device.txt"),
            include_str!("../ifc/rdma.txt"),
            include_str!("../ifc/cm.txt"),
        ] {
            for line in text.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let cols: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(cols.len(), 4, "bad reference row: {line}");
                let num = |s: &str| usize::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
                table.insert(
                    (cols[0].to_string(), cols[1].to_string()),
                    (num(cols[2]), num(cols[3])),
                );
            }
        }
        table
    })
}

/// Checks `T`'s size and every declared field against the reference; returns how many
/// checks were made (one per field, plus one for the size).
pub fn check_offsets<T: Layout>() -> usize {
    let table = reference();
    let key = |f: &str| (T::IFC_NAME.to_string(), f.to_string());
    let size_bits = table
        .get(&key("@size"))
        .unwrap_or_else(|| panic!("{}: no size in the reference", T::IFC_NAME))
        .1;
    assert_eq!(T::SIZE * 8, size_bits, "{}: size", T::IFC_NAME);
    let mut checks = 1;
    for field in T::FIELDS {
        let &(offset, width) = table
            .get(&key(field.name))
            .unwrap_or_else(|| panic!("{}.{}: not in the reference", T::IFC_NAME, field.name));
        assert_eq!(
            field.bit_offset,
            offset,
            "{}.{}: bit offset {:#x}, reference says {:#x}",
            T::IFC_NAME,
            field.name,
            field.bit_offset,
            offset
        );
        assert_eq!(
            field.width,
            width,
            "{}.{}: width {:#x}, reference says {:#x}",
            T::IFC_NAME,
            field.name,
            field.width,
            width
        );
        assert!(
            !field.doc.trim().is_empty(),
            "{}.{}: no doc",
            T::IFC_NAME,
            field.name
        );
        checks += 1;
    }
    checks
}

/// Reads bit `n` (manual numbering: bit 0 is the MSB of byte 0) of `bytes`.
fn bit(bytes: &[u8], n: usize) -> u64 {
    u64::from((bytes[n / 8] >> (7 - n % 8)) & 1)
}

/// A value for field `index` of `width` bits: non-zero, different from its neighbours', with
/// its top and bottom bits set so a shifted or truncated placement shows.
fn pattern(index: usize, width: usize) -> u64 {
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let base = 0x9e37_79b9_7f4a_7c15u64.rotate_left((index * 7 % 64) as u32);
    let top = 1u64 << (width - 1);
    (base | top | 1) & mask
}

/// Sets every scalar field of `T` to a distinct value through its setter, then checks every
/// getter and the raw bits; returns how many fields were checked.
pub fn round_trip<T: Layout>() -> usize {
    let scalars: Vec<_> = T::FIELDS
        .iter()
        .filter(|f| f.kind == FieldKind::Scalar)
        .collect();
    assert_eq!(
        scalars.len(),
        T::ACCESSORS.len(),
        "{}: accessor table",
        T::IFC_NAME
    );
    let mut layout = T::zeroed_layout();
    for (i, (field, (_, set))) in scalars.iter().zip(T::ACCESSORS).enumerate() {
        set(&mut layout, pattern(i, field.width));
    }
    for (i, (field, (get, _))) in scalars.iter().zip(T::ACCESSORS).enumerate() {
        let want = pattern(i, field.width);
        assert_eq!(
            get(&layout),
            want,
            "{}.{}: read back",
            T::IFC_NAME,
            field.name
        );
        let bytes = layout.layout_bytes();
        let mut raw = 0u64;
        for n in field.bit_offset..field.bit_offset + field.width {
            raw = (raw << 1) | bit(bytes, n);
        }
        assert_eq!(raw, want, "{}.{}: raw bits", T::IFC_NAME, field.name);
    }
    // Clearing each field in turn must leave every other field intact.
    for (i, (field, (_, set))) in scalars.iter().zip(T::ACCESSORS).enumerate() {
        set(&mut layout, 0);
        for (j, (other, (get, _))) in scalars.iter().zip(T::ACCESSORS).enumerate() {
            let want = if j <= i { 0 } else { pattern(j, other.width) };
            assert_eq!(
                get(&layout),
                want,
                "{}.{} after clearing {}",
                T::IFC_NAME,
                other.name,
                field.name
            );
        }
    }
    scalars.len()
}

/// Both checks for each listed layout; evaluates to the number of offset checks made.
#[macro_export]
macro_rules! check_layouts {
    ($($ty:ty),* $(,)?) => {{
        let mut checks = 0usize;
        $(
            checks += common::check_offsets::<$ty>();
            common::round_trip::<$ty>();
        )*
        checks
    }};
}
