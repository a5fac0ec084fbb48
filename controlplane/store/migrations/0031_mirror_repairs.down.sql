DROP TABLE usage_mirror_repairs;
