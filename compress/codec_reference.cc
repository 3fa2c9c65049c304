#include "compress/codec_reference.h"

#include "common/str_cat.h"

namespace gcagent::compress {

std::vector<ParamInfo> codecParams(const CodecInfo& codec) {
  ParamRecorder recorder;
  (void)codec.make({}, {});  // the defaults always build
  return recorder.params();
}

std::string codecReferenceMarkdown() {
  std::string out = "| codec | parameter | type | default | range | meaning |\n|---|---|---|---|---|---|\n";
  for (const CodecInfo& codec : codecList()) {
    const std::vector<ParamInfo> params = codecParams(codec);
    if (params.empty()) out += strCat("| `", codec.name, "`: ", codec.summary, " | | | | | no parameters |\n");
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamInfo& p = params[i];
      // The codec's name and summary once, on its first row.
      const std::string name_cell = i == 0 ? strCat("`", codec.name, "`: ", codec.summary) : std::string();
      out += strCat("| ", name_cell, " | `", p.key, "` | ", p.type, " | `", p.default_text, "` | ", p.range, " | ",
                    p.help, " |\n");
    }
  }
  return out;
}

}  // namespace gcagent::compress
