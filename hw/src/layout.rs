//! The machinery behind every device layout: big-endian bit-field access in the numbering the
//! manual uses, and the `layout!` macro that turns a declarative field table into a typed view.
//!
//! The manual (and Linux `mlx5_ifc.h`) numbers bits from the most significant bit of the first
//! big-endian dword: bit offset 0 is bit 31 of dword 0, bit offset 0x20 is bit 31 of dword 1. A
//! field of width `w` at offset `o` therefore sits in dword `o / 32`, in bits
//! `31 - o % 32 ..= 32 - o % 32 - w` of that dword. Fields wider than what remains of their dword
//! (64-bit addresses) are read through the 64-bit window starting at that dword.

use thiserror::Error;

/// Why a byte buffer could not be viewed as a layout, or an array element reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum LayoutError {
    /// The buffer is shorter than the fixed part of the layout.
    #[error("buffer of {len} bytes is too short for `{layout}`, which needs {need} bytes")]
    TooShort {
        /// The layout's name as written in `mlx5_ifc.h` or the manual.
        layout: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes supplied.
        len: usize,
    },
    /// An array element lies past the end of the buffer.
    #[error("element {index} of `{layout}.{field}` lies past the end of the {len}-byte buffer")]
    IndexOutOfRange {
        /// The layout's name.
        layout: &'static str,
        /// The array field's name.
        field: &'static str,
        /// The element asked for.
        index: usize,
        /// Bytes in the buffer.
        len: usize,
    },
}

/// One row of a layout's declarative table: where a field lives and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldInfo {
    /// Field name as in `mlx5_ifc.h` (or the manual, for layouts ifc does not describe).
    pub name: &'static str,
    /// Offset in bits from the most significant bit of the first big-endian dword.
    pub bit_offset: usize,
    /// Width in bits (1..=64 for scalars; the nested layout's size for nested layouts; the
    /// element width for arrays).
    pub width: usize,
    /// What the field is, as documented on its accessor.
    pub doc: &'static str,
    /// Scalar, nested layout, or array of scalars.
    pub kind: FieldKind,
    /// For a [`FieldKind::Nested`] field, the nested layout's own table (so a decoder can walk
    /// into it without naming its type); empty for scalars and arrays.
    pub nested: &'static [FieldInfo],
}

impl FieldInfo {
    /// Byte offset of the big-endian dword that holds the field's first bit.
    #[inline(always)]
    pub const fn dword_byte(&self) -> usize {
        self.bit_offset / 32 * 4
    }

    /// True when the field lies inside one big-endian dword.
    #[inline(always)]
    pub const fn in_one_dword(&self) -> bool {
        self.bit_offset % 32 + self.width <= 32
    }

    /// Right shift that brings the field down to bit 0 of its dword (for a field
    /// [`in_one_dword`](Self::in_one_dword)).
    #[inline(always)]
    pub const fn dword_shift(&self) -> u32 {
        (32 - self.bit_offset % 32 - self.width) as u32
    }

    /// Byte offset of the byte that holds the field's first bit.
    #[inline(always)]
    pub const fn byte(&self) -> usize {
        self.bit_offset / 8
    }

    /// True when the field lies inside one byte.
    #[inline(always)]
    pub const fn in_one_byte(&self) -> bool {
        self.bit_offset % 8 + self.width <= 8
    }

    /// Right shift that brings the field down to bit 0 of its byte (for a field
    /// [`in_one_byte`](Self::in_one_byte)).
    #[inline(always)]
    pub const fn byte_shift(&self) -> u32 {
        (8 - self.bit_offset % 8 - self.width) as u32
    }

    /// All-ones mask of the field's width, at bit 0.
    #[inline(always)]
    pub const fn mask(&self) -> u64 {
        mask(self.width)
    }
}

/// Row `name` of layout `L`'s field table, found at compile time when used in a `const` (a name
/// not in the table fails the build). For code that decodes a layout from words of its own on a
/// hot path: its offsets, shifts and masks then come from the one table, as constants.
pub const fn field<L: Layout>(name: &str) -> FieldInfo {
    let fields = L::FIELDS;
    let mut i = 0;
    while i < fields.len() {
        if str_eq(fields[i].name, name) {
            return fields[i];
        }
        i += 1;
    }
    panic!("no such field in the layout's table");
}

/// `a == b`, usable in constants.
const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// What kind of field a [`FieldInfo`] row describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A value of 1 to 64 bits read through a getter and written through a setter.
    Scalar,
    /// Another layout embedded at a byte offset.
    Nested,
    /// A run of equal-width scalar elements that continues to the end of the buffer.
    Array,
}

/// A raw getter and setter pair for one scalar field of layout `L`.
#[doc(hidden)]
pub type RawAccessor<L> = (fn(&L) -> u64, fn(&mut L, u64));

/// Implemented by every layout: its name, size and field table.
pub trait Layout: Sized + 'static {
    /// The structure's name in `mlx5_ifc.h` (without the `mlx5_ifc_` prefix and `_bits` suffix),
    /// or in the source named in its doc comment.
    const IFC_NAME: &'static str;
    /// Size of the fixed part in bytes.
    const SIZE: usize;
    /// Every declared field, in declaration order.
    const FIELDS: &'static [FieldInfo];
    /// Raw getter and setter of every scalar field, in table order (tests use these to reach
    /// the named accessors generically).
    #[doc(hidden)]
    const ACCESSORS: &'static [RawAccessor<Self>];
    /// An all-zero instance.
    fn zeroed_layout() -> Self;
    /// The fixed part's bytes.
    fn layout_bytes(&self) -> &[u8];
}

/// A scalar type that a bit field can be read as and written from.
pub trait FieldValue: Copy {
    /// Widest field this type can hold, in bits.
    const BITS: usize;
    /// Converts from the raw field value (already masked to the field's width).
    fn from_raw(raw: u64) -> Self;
    /// Converts to the raw field value (masked to the field's width by the writer).
    fn to_raw(self) -> u64;
}

macro_rules! impl_field_value {
    ($($ty:ty),*) => {$(
        impl FieldValue for $ty {
            const BITS: usize = <$ty>::BITS as usize;
            #[inline(always)]
            fn from_raw(raw: u64) -> Self {
                raw as $ty
            }
            #[inline(always)]
            fn to_raw(self) -> u64 {
                self as u64
            }
        }
    )*};
}
impl_field_value!(u8, u16, u32, u64);

impl FieldValue for bool {
    const BITS: usize = 1;
    #[inline(always)]
    fn from_raw(raw: u64) -> Self {
        raw != 0
    }
    #[inline(always)]
    fn to_raw(self) -> u64 {
        self as u64
    }
}

/// All-ones mask of `width` bits (1..=64).
#[inline(always)]
pub const fn mask(width: usize) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// True when a field at `bit_offset` of `width` bits fits the dword or 64-bit window that the
/// accessors read it through, and ends within `size_bytes`.
pub const fn field_fits(bit_offset: usize, width: usize, size_bytes: usize) -> bool {
    let in_dword = bit_offset % 32;
    let window_end = if in_dword + width <= 32 {
        bit_offset - in_dword + 32
    } else {
        bit_offset - in_dword + 64
    };
    width >= 1 && width <= 64 && in_dword + width <= 64 && window_end <= size_bytes * 8
}

/// Reads a field in manual bit numbering. The caller guarantees `field_fits` for `buf.len()`.
#[inline(always)]
pub fn read_field(buf: &[u8], bit_offset: usize, width: usize) -> u64 {
    let start = bit_offset / 32 * 4;
    let in_dword = bit_offset % 32;
    if in_dword + width <= 32 {
        let mut word = [0u8; 4];
        word.copy_from_slice(&buf[start..start + 4]);
        (u64::from(u32::from_be_bytes(word)) >> (32 - in_dword - width)) & mask(width)
    } else {
        let mut word = [0u8; 8];
        word.copy_from_slice(&buf[start..start + 8]);
        (u64::from_be_bytes(word) >> (64 - in_dword - width)) & mask(width)
    }
}

/// Writes a field in manual bit numbering, leaving the neighbouring bits as they were. Bits of
/// `value` above `width` are dropped. The caller guarantees `field_fits` for `buf.len()`.
#[inline(always)]
pub fn write_field(buf: &mut [u8], bit_offset: usize, width: usize, value: u64) {
    let start = bit_offset / 32 * 4;
    let in_dword = bit_offset % 32;
    if in_dword + width <= 32 {
        let shift = 32 - in_dword - width;
        let field_mask = (mask(width) << shift) as u32;
        let mut word = [0u8; 4];
        word.copy_from_slice(&buf[start..start + 4]);
        let old = u32::from_be_bytes(word);
        let new = (old & !field_mask) | (((value << shift) as u32) & field_mask);
        buf[start..start + 4].copy_from_slice(&new.to_be_bytes());
    } else {
        let shift = 64 - in_dword - width;
        let field_mask = mask(width) << shift;
        let mut word = [0u8; 8];
        word.copy_from_slice(&buf[start..start + 8]);
        let old = u64::from_be_bytes(word);
        let new = (old & !field_mask) | ((value << shift) & field_mask);
        buf[start..start + 8].copy_from_slice(&new.to_be_bytes());
    }
}

/// Declares a device layout as a view over bytes, from a table that reads like the manual.
///
/// ```ignore
/// layout! {
///     /// Completion queue context.
///     pub struct Cqc("cqc", 0x40) {
///         /// Log2 of the number of CQEs.
///         log_cq_size: u8 @ 0x63 [5],
///     }
///     nested {
///         /// A context embedded at bit offset 0x80 (must be byte aligned).
///         inner: Other @ 0x80,
///     }
///     arrays {
///         /// Elements of 64 bits from bit offset 0x880 to the end of the buffer.
///         pas: u64 @ 0x880 [0x40],
///     }
/// }
/// ```
///
/// `Cqc<T>` wraps any `T: AsRef<[u8]>` at least `SIZE` bytes long (a stack array for a WQE being
/// built, a slice of a command mailbox, ...). Scalars get `name()` and `set_name(v)`; nested
/// layouts get `name()` and `name_mut()` views; arrays get `name(i)` and `set_name(i, v)`
/// returning `Result`. `Cqc::zeroed()` is an owned, all-zero instance.
#[macro_export]
macro_rules! layout {
    (
        $(#[doc = $sdoc:expr])*
        $vis:vis struct $name:ident ($ifc:literal, $size:expr) {
            $(
                $(#[doc = $fdoc:expr])*
                $field:ident : $fty:ident @ $bit:literal [$width:expr]
            ),* $(,)?
        }
        $(nested {
            $(
                $(#[doc = $ndoc:expr])*
                $nfield:ident : $nty:ident @ $nbit:literal
            ),* $(,)?
        })?
        $(arrays {
            $(
                $(#[doc = $adoc:expr])*
                $afield:ident : $aty:ident @ $abit:literal [$awidth:expr]
            ),* $(,)?
        })?
    ) => {
        $(#[doc = $sdoc])*
        #[doc = ""]
        #[doc = concat!("Layout `", $ifc, "`: ", stringify!($size), " bytes.")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis struct $name<T = [u8; $size]> {
            // Crate-visible so enclosing layouts in other modules can build nested views.
            pub(crate) buf: T,
        }

        $crate::paste::paste! {
        impl $crate::layout::Layout for $name {
            const ACCESSORS: &'static [$crate::layout::RawAccessor<Self>] = &[
                $(
                    (
                        |s: &Self| <$fty as $crate::layout::FieldValue>::to_raw(s.$field()),
                        |s: &mut Self, v: u64| {
                            s.[<set_ $field>](<$fty as $crate::layout::FieldValue>::from_raw(v));
                        },
                    ),
                )*
            ];
            fn zeroed_layout() -> Self {
                Self::zeroed()
            }
            fn layout_bytes(&self) -> &[u8] {
                &self.buf
            }
            const IFC_NAME: &'static str = $ifc;
            const SIZE: usize = $size;
            const FIELDS: &'static [$crate::layout::FieldInfo] = &[
                $($crate::layout::FieldInfo {
                    name: stringify!($field),
                    bit_offset: $bit,
                    width: $width,
                    doc: concat!($($fdoc),*),
                    kind: $crate::layout::FieldKind::Scalar,
                    nested: &[],
                },)*
                $($($crate::layout::FieldInfo {
                    name: stringify!($nfield),
                    bit_offset: $nbit,
                    width: <$nty as $crate::layout::Layout>::SIZE * 8,
                    doc: concat!($($ndoc),*),
                    kind: $crate::layout::FieldKind::Nested,
                    nested: <$nty as $crate::layout::Layout>::FIELDS,
                },)*)?
                $($($crate::layout::FieldInfo {
                    name: stringify!($afield),
                    bit_offset: $abit,
                    width: $awidth,
                    doc: concat!($($adoc),*),
                    kind: $crate::layout::FieldKind::Array,
                    nested: &[],
                },)*)?
            ];
        }
        }

        // Every field must fit the window its accessor reads, and suit the type it is read as.
        const _: () = {
            $(
                assert!($crate::layout::field_fits($bit, $width, $size), concat!(stringify!($name), ".", stringify!($field), " does not fit"));
                assert!($width <= <$fty as $crate::layout::FieldValue>::BITS, concat!(stringify!($name), ".", stringify!($field), " is wider than its type"));
            )*
            $($(
                assert!($nbit % 8 == 0, concat!(stringify!($name), ".", stringify!($nfield), " is not byte aligned"));
                assert!($nbit / 8 + <$nty as $crate::layout::Layout>::SIZE <= $size, concat!(stringify!($name), ".", stringify!($nfield), " does not fit"));
            )*)?
            $($(
                assert!($abit % 8 == 0 && $awidth % 8 == 0 && $awidth <= 64, concat!(stringify!($name), ".", stringify!($afield), " elements must be whole bytes, at most 8"));
                assert!($abit / 8 <= $size, concat!(stringify!($name), ".", stringify!($afield), " starts past the fixed part"));
            )*)?
        };

        impl $name {
            /// An owned, all-zero instance.
            pub const fn zeroed() -> Self {
                Self { buf: [0u8; $size] }
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::zeroed()
            }
        }

        impl<T> $name<T> {
            /// Size of the fixed part in bytes.
            pub const SIZE: usize = $size;

            /// Gives back the wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buf
            }
        }

        #[allow(clippy::len_without_is_empty)]
        impl<T: AsRef<[u8]>> $name<T> {
            /// Views `buf` as this layout; fails when it is shorter than the fixed part.
            pub fn new(buf: T) -> Result<Self, $crate::layout::LayoutError> {
                let len = buf.as_ref().len();
                if len < $size {
                    return Err($crate::layout::LayoutError::TooShort { layout: $ifc, need: $size, len });
                }
                Ok(Self { buf })
            }

            /// The whole wrapped buffer, including any array part past the fixed part.
            pub fn as_bytes(&self) -> &[u8] {
                self.buf.as_ref()
            }

            $crate::paste::paste! {
                $(
                    $(#[doc = $fdoc])*
                    #[doc = ""]
                    #[doc = concat!("Bits `", stringify!($bit), "` + `", stringify!($width), "` of `", $ifc, "`.")]
                    #[inline(always)]
                    pub fn $field(&self) -> $fty {
                        <$fty as $crate::layout::FieldValue>::from_raw(
                            $crate::layout::read_field(self.buf.as_ref(), $bit, $width))
                    }
                )*
                $($(
                    $(#[doc = $ndoc])*
                    #[inline(always)]
                    pub fn $nfield(&self) -> $nty<&[u8]> {
                        const START: usize = $nbit / 8;
                        $nty { buf: &self.buf.as_ref()[START..START + <$nty as $crate::layout::Layout>::SIZE] }
                    }
                )*)?
                $($(
                    $(#[doc = $adoc])*
                    #[doc = ""]
                    #[doc = "Fails when element `index` lies past the end of the buffer."]
                    #[inline(always)]
                    pub fn $afield(&self, index: usize) -> Result<$aty, $crate::layout::LayoutError> {
                        let buf = self.buf.as_ref();
                        let start = $abit / 8 + index * ($awidth / 8);
                        if start + $awidth / 8 > buf.len() {
                            return Err($crate::layout::LayoutError::IndexOutOfRange {
                                layout: $ifc, field: stringify!($afield), index, len: buf.len() });
                        }
                        let mut raw = 0u64;
                        for byte in &buf[start..start + $awidth / 8] {
                            raw = (raw << 8) | u64::from(*byte);
                        }
                        Ok(<$aty as $crate::layout::FieldValue>::from_raw(raw))
                    }

                    #[doc = concat!("Number of whole `", stringify!($afield), "` elements the buffer holds.")]
                    #[inline(always)]
                    pub fn [<$afield _capacity>](&self) -> usize {
                        self.buf.as_ref().len().saturating_sub($abit / 8) / ($awidth / 8)
                    }
                )*)?
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            /// The whole wrapped buffer, writable.
            pub fn as_bytes_mut(&mut self) -> &mut [u8] {
                self.buf.as_mut()
            }

            $crate::paste::paste! {
                $(
                    #[doc = concat!("Sets `", stringify!($field), "`: see [`Self::", stringify!($field), "`]. Bits above the field's width are dropped.")]
                    #[inline(always)]
                    pub fn [<set_ $field>](&mut self, value: $fty) -> &mut Self {
                        $crate::layout::write_field(self.buf.as_mut(), $bit, $width,
                            <$fty as $crate::layout::FieldValue>::to_raw(value));
                        self
                    }
                )*
                $($(
                    #[doc = concat!("Writable view of `", stringify!($nfield), "`: see [`Self::", stringify!($nfield), "`].")]
                    #[inline(always)]
                    pub fn [<$nfield _mut>](&mut self) -> $nty<&mut [u8]> {
                        const START: usize = $nbit / 8;
                        $nty { buf: &mut self.buf.as_mut()[START..START + <$nty as $crate::layout::Layout>::SIZE] }
                    }
                )*)?
                $($(
                    #[doc = concat!("Sets element `index` of `", stringify!($afield), "`; fails past the end of the buffer.")]
                    #[inline(always)]
                    pub fn [<set_ $afield>](&mut self, index: usize, value: $aty) -> Result<&mut Self, $crate::layout::LayoutError> {
                        let buf = self.buf.as_mut();
                        let start = $abit / 8 + index * ($awidth / 8);
                        if start + $awidth / 8 > buf.len() {
                            return Err($crate::layout::LayoutError::IndexOutOfRange {
                                layout: $ifc, field: stringify!($afield), index, len: buf.len() });
                        }
                        let raw = <$aty as $crate::layout::FieldValue>::to_raw(value);
                        let bytes = raw.to_be_bytes();
                        buf[start..start + $awidth / 8].copy_from_slice(&bytes[8 - $awidth / 8..]);
                        Ok(self)
                    }
                )*)?
            }
        }

    };
}
