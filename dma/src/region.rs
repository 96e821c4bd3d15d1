//! DMA regions. (Being written.)
