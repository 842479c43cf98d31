//! [`Out`]: writes the families of one `/metrics` page into `prometheus-client`'s encoder,
//! each sample with its `lineage_node` label.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// Encodes families into `encoder`, each sample with its `lineage_node` label and `labels`.
pub(super) struct Out<'a, 'b> {
    pub(super) encoder: DescriptorEncoder<'a>,
    pub(super) node: &'b str,
}

impl Out<'_, '_> {
    pub(super) fn counter(
        &mut self,
        name: &str,
        help: &str,
        samples: &[(&[(&str, &str)], u64)],
    ) -> Result<(), std::fmt::Error> {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, value) in samples {
            let labels = with_node(self.node, labels);
            ConstCounter::new(*value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    pub(super) fn gauge(
        &mut self,
        name: &str,
        help: &str,
        samples: &[(&[(&str, &str)], f64)],
    ) -> Result<(), std::fmt::Error> {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, value) in samples {
            let labels = with_node(self.node, labels);
            ConstGauge::new(*value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    pub(super) fn one(
        &mut self,
        name: &str,
        help: &str,
        value: f64,
    ) -> Result<(), std::fmt::Error> {
        self.gauge(name, help, &[(&[], value)])
    }

    pub(super) fn histogram(
        &mut self,
        name: &str,
        help: &str,
        h: &lineage_host::LatencyHistogram,
    ) -> Result<(), std::fmt::Error> {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        let labels = with_node(self.node, &[]);
        family
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(h.sum_seconds(), h.count, &h.buckets_seconds(), None)
    }
}

impl Out<'_, '_> {
    /// `lineage_agent_cost_total{currency}`, in the currency's units.
    pub(super) fn cost(&mut self, micros: &[(String, u64)]) -> Result<(), std::fmt::Error> {
        let mut family = self.encoder.encode_descriptor(
            "lineage_agent_cost",
            "Cost the agents of this node reported, in units of the currency.",
            None,
            MetricType::Counter,
        )?;
        for (currency, micros) in micros {
            let labels = with_node(self.node, &[("currency", currency.as_str())]);
            ConstCounter::new(*micros as f64 / 1_000_000.0)
                .encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// The `process_*` families.
    pub(super) fn process(
        &mut self,
        p: &crate::process::ProcessFigures,
    ) -> Result<(), std::fmt::Error> {
        let mut family = self.encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time of this process, seconds.",
            None,
            MetricType::Counter,
        )?;
        let labels = with_node(self.node, &[]);
        ConstCounter::new(p.cpu_seconds).encode(family.encode_family(&labels)?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory of this process.",
                p.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory of this process.",
                p.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Open file descriptors.",
                p.open_fds as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of this process, seconds since the Unix epoch.",
                p.start_time_seconds,
            ),
        ] {
            self.one(name, help, value)?;
        }
        if let Some(max) = p.max_fds {
            self.one(
                "process_max_fds",
                "The soft limit on open file descriptors.",
                max as f64,
            )?;
        }
        Ok(())
    }
}

fn with_node<'a>(node: &'a str, labels: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut all = Vec::with_capacity(labels.len() + 1);
    all.push(("lineage_node", node));
    all.extend_from_slice(labels);
    all
}
