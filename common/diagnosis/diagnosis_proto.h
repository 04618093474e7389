// Converting a Diagnosis to and from its wire form (proto/diagnosis.proto), for the agent's
// events and the daemon's record. A separate target (fleet::diagnosis_proto) so the engine itself
// stays free of protobuf.
#pragma once

#include "common/diagnosis/diagnosis.h"
#include "proto/diagnosis.pb.h"

namespace fleet::diagnosis {

void ToProto(const Diagnosis& d, fleet::v1::Diagnosis* out);
Diagnosis FromProto(const fleet::v1::Diagnosis& in);

}  // namespace fleet::diagnosis
