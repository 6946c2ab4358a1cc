use super::*;

#[test]
fn control_has_an_instance_id() {
    let c = reload::Control::new();
    assert!(c.instance_id().contains('-'));
}
