DROP TABLE marketplace_plugins;
DROP TABLE marketplace_grants;
DROP TABLE marketplaces;
DROP TABLE plugins;
