//! A batch result's touches as columns: the `output: "packed"` form of `processRows` and
//! `processBatch`. Built where the batch ran (off the JS thread), so that the JS side only
//! wraps the vectors in typed arrays.

use super::{ProcessResult, Touch, TouchKind};

/// `template_index` where a touch has no template.
pub const NO_TEMPLATE: u32 = u32::MAX;

/// The touches of a batch, column by column, in emitted order: touch `i` is `key_ids[i]`,
/// `watermarks[i]`, `routing_keys[i]` when `has_routing_key[i]` is 1 (0 otherwise),
/// `kinds[i]` (0 table, 1 template), entity `entity_index[i]` and template
/// `template_index[i]` (indexes into the result's `entities` and `template_ids`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TouchColumns {
    pub key_ids: Vec<u32>,
    pub watermarks: Vec<i64>,
    pub routing_keys: Vec<u64>,
    pub has_routing_key: Vec<u8>,
    pub kinds: Vec<u8>,
    pub entity_index: Vec<u32>,
    pub template_index: Vec<u32>,
}

impl TouchColumns {
    pub fn new(touches: &[Touch]) -> TouchColumns {
        let n = touches.len();
        let mut c = TouchColumns {
            key_ids: Vec::with_capacity(n),
            watermarks: Vec::with_capacity(n),
            routing_keys: Vec::with_capacity(n),
            has_routing_key: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            entity_index: Vec::with_capacity(n),
            template_index: Vec::with_capacity(n),
        };
        for t in touches {
            c.key_ids.push(t.key_id);
            c.watermarks.push(t.watermark);
            c.routing_keys.push(t.routing_key.unwrap_or(0));
            c.has_routing_key.push(t.routing_key.is_some() as u8);
            c.kinds.push(match t.kind {
                TouchKind::Table => 0,
                TouchKind::Template => 1,
            });
            c.entity_index.push(t.entity);
            c.template_index.push(t.template.unwrap_or(NO_TEMPLATE));
        }
        c
    }

    pub fn len(&self) -> usize {
        self.key_ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key_ids.is_empty()
    }

    /// Touch `i` back from the columns.
    pub fn touch(&self, i: usize) -> Touch {
        Touch {
            key_id: self.key_ids[i],
            routing_key: (self.has_routing_key[i] != 0).then_some(self.routing_keys[i]),
            watermark: self.watermarks[i],
            entity: self.entity_index[i],
            kind: if self.kinds[i] == 1 { TouchKind::Template } else { TouchKind::Table },
            template: (self.template_index[i] != NO_TEMPLATE).then_some(self.template_index[i]),
        }
    }
}

/// A batch result with its touches moved into columns (`result.touches` is left empty).
#[derive(Debug, Clone, PartialEq)]
pub struct PackedResult {
    pub result: ProcessResult,
    pub columns: TouchColumns,
}

impl PackedResult {
    pub fn new(mut result: ProcessResult) -> PackedResult {
        let columns = TouchColumns::new(&result.touches);
        result.touches = Vec::new();
        PackedResult { result, columns }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::batch::tests::{p17_request, p17_rows, p17_template};
    use crate::processor::{process_rows, Granularity};

    fn check(result: ProcessResult) {
        let packed = PackedResult::new(result.clone());
        assert!(packed.result.touches.is_empty());
        assert_eq!(packed.result.stats, result.stats);
        assert_eq!(packed.columns.len(), result.touches.len());
        let back: Vec<Touch> = (0..packed.columns.len()).map(|i| packed.columns.touch(i)).collect();
        assert_eq!(back, result.touches);
        for (i, t) in result.touches.iter().enumerate() {
            assert_eq!(packed.columns.routing_keys[i], t.routing_key.unwrap_or(0));
        }
    }

    #[test]
    fn columns_hold_the_touches_in_order() {
        let r = process_rows(&p17_request(), &p17_rows(), &[p17_template()]).unwrap();
        assert!(r.touches.iter().any(|t| t.routing_key.is_some()));
        assert!(r.touches.iter().any(|t| t.routing_key.is_none() && t.template.is_none()));
        check(r);
        let mut template = p17_request();
        template.fine_granularity = Granularity::Template;
        let r = process_rows(&template, &p17_rows(), &[p17_template()]).unwrap();
        assert!(r.touches.iter().any(|t| t.kind == TouchKind::Template && t.routing_key.is_none()));
        check(r);
    }

    #[test]
    fn an_empty_batch_has_empty_columns() {
        let mut req = p17_request();
        req.to_offset = req.from_offset - 1;
        let r = process_rows(&req, &p17_rows(), &[p17_template()]).unwrap();
        assert!(r.touches.is_empty());
        let packed = PackedResult::new(r);
        assert!(packed.columns.is_empty());
        assert_eq!(packed.columns, TouchColumns::default());
    }
}
