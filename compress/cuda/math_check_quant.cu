// Element math of onebit, terngrad and qsgd under nvcc.
