//! IOVA allocation from the ranges an IOMMU offers. (Being written.)
