"""moeroof.studies"""
