// What a codec definition (compress/codecs/<name>.h) is written with: the element
// vocabulary (lanes.h), the code layout (codes.h) and the parameter reader. A quantizer
// definition is a struct with
//   kName, kSummary          the registry row: the name configs and clients send, one line
//   Codes                    compll::Codes<bits>: where each element's code lives
//   Params, read(reader)     its parameters, read and range-checked (host only)
//   encode<L>(l, g, r, p)    the code of g + r, leaving in r what the code does not carry
//   decode<L>(l, code, p)    the value a code stands for
// and nothing else: the CPU loops (vectorised, split over the codec pool), the GPU kernels,
// the `error_feedback` parameter and the registry row come from compll.
#pragma once

#include <string_view>

#include "compress/compll/codes.h"
#include "compress/compll/lanes.h"
#include "compress/params.h"
