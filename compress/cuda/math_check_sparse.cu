// Element math of topk, dgc, threshold and randomk under nvcc.
