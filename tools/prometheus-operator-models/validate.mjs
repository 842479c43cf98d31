// Validates the prometheus-operator objects (PrometheusRule, ServiceMonitor) of rendered chart
// manifests against the operator's CRD schemas (monitoring.coreos.com/v1, as compiled by
// @kubernetes-models/prometheus-operator): types, required fields, enums and patterns (e.g. a
// rule's `for` duration). Those schemas do not refuse unknown fields; promtool's strict parse of
// the rules does (scripts/check-chart.sh). Usage: node validate.mjs <manifests.json>..., each a
// JSON array of the documents of one rendered manifest. Prints one line per object; exits 1 when
// one is invalid, 2 when a file holds no object of these kinds.
import { readFileSync } from "node:fs";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const KINDS = { PrometheusRule, ServiceMonitor };
let bad = 0;
for (const path of process.argv.slice(2)) {
  const name = path.split("/").pop();
  let seen = 0;
  for (const doc of JSON.parse(readFileSync(path, "utf8"))) {
    if (!doc || doc.apiVersion !== "monitoring.coreos.com/v1" || !(doc.kind in KINDS)) continue;
    seen += 1;
    const what = `${name}: ${doc.kind}/${doc.metadata?.name}`;
    try {
      new KINDS[doc.kind](doc).validate();
      console.log(`ok ${what}`);
    } catch (e) {
      console.log(`invalid ${what}: ${e.message}`);
      bad += 1;
    }
  }
  if (!seen) {
    console.log(`none ${name}: no PrometheusRule or ServiceMonitor`);
    process.exitCode = 2;
  }
}
if (bad) process.exitCode = 1;
