//! What goes on the wire: the OTLP/JSON body of a batch and its HTTP/1.1 POST.

use std::time::Duration;

use lineage_bus::trace::hex;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{AttrValue, Endpoint, OtlpConfig, SpanRecord};

fn attr_json(key: &str, value: &AttrValue) -> Value {
    let v = match value {
        AttrValue::Str(s) => json!({ "stringValue": s }),
        AttrValue::Int(i) => json!({ "intValue": i.to_string() }),
        AttrValue::Bool(b) => json!({ "boolValue": b }),
        AttrValue::Double(d) if d.is_finite() => json!({ "doubleValue": d }),
        AttrValue::Double(d) => json!({ "stringValue": d.to_string() }),
    };
    json!({ "key": key, "value": v })
}

/// The OTLP/JSON body for one batch.
pub(super) fn encode(cfg: &OtlpConfig, spans: &[SpanRecord]) -> Vec<u8> {
    let mut resource = vec![
        attr_json("service.name", &AttrValue::Str(cfg.service_name.clone())),
        attr_json(
            "service.version",
            &AttrValue::Str(env!("CARGO_PKG_VERSION").to_owned()),
        ),
    ];
    resource.extend(
        cfg.resource
            .iter()
            .map(|(k, v)| attr_json(k, &AttrValue::Str(v.clone()))),
    );
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            let mut span = json!({
                "traceId": hex(&s.trace_id),
                "spanId": hex(&s.span_id),
                "name": s.name,
                "kind": 1,
                "startTimeUnixNano": s.start_ns.to_string(),
                "endTimeUnixNano": s.end_ns.max(s.start_ns).to_string(),
                "attributes": s.attrs.iter().map(|(k, v)| attr_json(k, v)).collect::<Vec<_>>(),
            });
            if let Some(p) = s.parent_span_id {
                span["parentSpanId"] = json!(hex(&p));
            }
            if let Some((_, AttrValue::Str(message))) = s.attrs.iter().find(|(k, _)| *k == "error")
            {
                span["status"] = json!({ "code": 2, "message": message });
            }
            span
        })
        .collect();
    let body = json!({
        "resourceSpans": [{
            "resource": { "attributes": resource },
            "scopeSpans": [{
                "scope": { "name": "lineage", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// One HTTP/1.1 POST; `Ok` on a 2xx status.
pub(super) async fn post(endpoint: &Endpoint, body: &[u8], limit: Duration) -> Result<(), String> {
    let exchange = async {
        let mut stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", endpoint.authority))?;
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nUser-Agent: lineage/{}\r\nConnection: close\r\n\r\n",
            endpoint.path,
            endpoint.authority,
            body.len(),
            env!("CARGO_PKG_VERSION"),
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| format!("cannot send to {}: {e}", endpoint.authority))?;
        stream
            .write_all(body)
            .await
            .map_err(|e| format!("cannot send to {}: {e}", endpoint.authority))?;
        stream
            .flush()
            .await
            .map_err(|e| format!("cannot send to {}: {e}", endpoint.authority))?;
        let mut buf = Vec::with_capacity(256);
        let mut chunk = [0u8; 512];
        while !buf.windows(2).any(|w| w == b"\r\n") && buf.len() < 8192 {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("no answer from {}: {e}", endpoint.authority))?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&buf);
        let status_line = text.lines().next().unwrap_or("").trim().to_owned();
        let code: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{} answered {status_line:?}, not HTTP", endpoint.authority))?;
        if (200..300).contains(&code) {
            Ok(())
        } else {
            Err(format!("collector answered {status_line:?}"))
        }
    };
    tokio::time::timeout(limit, exchange)
        .await
        .map_err(|_| format!("no answer from {} within {limit:?}", endpoint.authority))?
}
