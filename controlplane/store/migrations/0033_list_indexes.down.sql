DROP INDEX teams_org_live;
DROP INDEX members_org_live;
DROP INDEX api_keys_org_live;
