#include "common/diagnosis/diagnosis_proto.h"

namespace fleet::diagnosis {
namespace {

UnitKind UnitFromName(const std::string& name) {
  for (UnitKind k : {UnitKind::kNinjaFailed, UnitKind::kTraceback, UnitKind::kWorkerError,
                     UnitKind::kCompilerOutput, UnitKind::kLoose}) {
    if (UnitKindName(k) == name) return k;
  }
  return UnitKind::kNone;
}

Phase PhaseFromName(const std::string& name) {
  for (Phase p : {Phase::kStarting, Phase::kLoading, Phase::kJitCompiling, Phase::kCapturingGraphs,
                  Phase::kReady}) {
    if (PhaseName(p) == name) return p;
  }
  return Phase::kStarting;
}

}  // namespace

void ToProto(const Diagnosis& d, fleet::v1::Diagnosis* out) {
  out->Clear();
  out->set_diagnosis_class(d.diagnosis_class);
  out->set_signature_id(d.signature_id);
  out->set_root_cause_line(d.root_cause_line);
  out->set_summary(d.summary);
  out->set_fix_kind(std::string(FixKindName(d.fix)));
  out->set_toolchain_fix(d.toolchain_fix);
  out->set_unit(std::string(UnitKindName(d.unit)));
  for (const EvidenceLine& l : d.evidence) {
    auto* e = out->add_evidence();
    e->set_line(l.line);
    e->set_text(l.text);
  }
  for (const auto& [key, values] : d.facts.entries()) {
    auto* f = out->add_facts();
    f->set_key(key);
    for (const std::string& v : values) f->add_values(v);
  }
  for (const auto& [name, version] : d.facts.packages()) {
    auto* p = out->add_packages();
    p->set_name(name);
    p->set_version(version);
  }
  for (const SymptomHit& s : d.symptoms) {
    auto* sym = out->add_symptoms();
    sym->set_line(s.line);
    sym->set_diagnosis_class(s.diagnosis_class);
    sym->set_signature_id(s.signature_id);
  }
  out->set_provisional(d.provisional);
  out->set_phase(std::string(PhaseName(d.phase)));
  out->set_phase_detail(d.phase_detail);
  out->set_progress_step(d.progress_step);
  out->set_progress_total(d.progress_total);
  out->set_lines(d.lines);
  out->set_confidence(std::string(ConfidenceName(d.confidence)));
}

Diagnosis FromProto(const fleet::v1::Diagnosis& in) {
  Diagnosis d;
  d.diagnosis_class = in.diagnosis_class().empty() ? "none" : in.diagnosis_class();
  d.signature_id = in.signature_id();
  d.root_cause_line = in.root_cause_line();
  d.summary = in.summary();
  d.fix = ParseFixKind(in.fix_kind()).value_or(FixKind::kNone);
  d.toolchain_fix = in.toolchain_fix();
  d.unit = UnitFromName(in.unit());
  for (const auto& e : in.evidence()) d.evidence.push_back({e.line(), e.text()});
  for (const auto& f : in.facts()) {
    for (const std::string& v : f.values()) d.facts.Add(f.key(), v);
  }
  for (const auto& p : in.packages()) d.facts.AddPackage(p.name(), p.version());
  for (const auto& s : in.symptoms()) {
    d.symptoms.push_back({s.line(), s.diagnosis_class(), s.signature_id()});
  }
  d.provisional = in.provisional();
  d.phase = PhaseFromName(in.phase());
  d.phase_detail = in.phase_detail();
  d.progress_step = in.progress_step();
  d.progress_total = in.progress_total();
  d.lines = in.lines();
  d.confidence = ParseConfidence(in.confidence()).value_or(Confidence::kHigh);
  return d;
}

}  // namespace fleet::diagnosis
