"""Generated from proto/ by scripts/gen_proto.py; do not edit."""
